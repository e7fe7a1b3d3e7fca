/* ccn_weights.h: Weights family: loading a separate weights file. */
#ifndef CCN_WEIGHTS_H
#define CCN_WEIGHTS_H

#include "ccn_common.h"

CCN_BEGIN_DECLS

/* The block of a weights file (malloc'd; free() it), or NULL with a
 * one-line message naming the file in error when it cannot be read or
 * belongs to another model. */
void *ccn_load_weights(const char *path, uint64_t fingerprint, uint64_t nbytes, char *error,
                       size_t error_size);

CCN_END_DECLS
#endif /* CCN_WEIGHTS_H */
