/* ccn_weights.h: Weights family: loading a separate weights file. */
#ifndef CCN_WEIGHTS_H
#define CCN_WEIGHTS_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* nbytes (at least 1) of malloc'd memory starting at a 64-byte line, the
 * kernels' widest vector, so that no vector of an aligned offset straddles
 * two lines; *block receives the pointer to free().  NULL when out of
 * memory. */
void *ccn_alloc_lines(uint64_t nbytes, void **block);

/* The weights of a weights file, at a 64-byte line (ccn_alloc_lines: free()
 * *block), or NULL with a one-line message naming the file in error when it
 * cannot be read or belongs to another model. */
void *ccn_load_weights(const char *path, uint64_t fingerprint, uint64_t nbytes, void **block,
                       char *error, size_t error_size);

CCN_END_DECLS
#endif /* CCN_WEIGHTS_H */
