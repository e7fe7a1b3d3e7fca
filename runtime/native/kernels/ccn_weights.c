/* Weights family: loading NAME_weights.bin (see runtime/native/weights.py
 * for its format) for a model emitted with weights in a separate file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ccn_weights.h"

static const unsigned char magic[8] = {'C', 'C', 'N', 'W', 'G', 'H', 'T', '1'};

static uint64_t read_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

void *ccn_alloc_lines(uint64_t nbytes, void **block)
{
    enum { LINE = 64 };
    *block = nbytes <= SIZE_MAX - LINE ? malloc((size_t)nbytes + LINE) : NULL;
    if (!*block)
        return NULL;
    return (unsigned char *)*block + (LINE - (uintptr_t)*block % LINE) % LINE;
}

void *ccn_load_weights(const char *path, uint64_t fingerprint, uint64_t nbytes, void **block,
                       char *error, size_t error_size)
{
    unsigned char header[32];
    void *weights = NULL;
    *block = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(error, error_size, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (fread(header, 1, sizeof header, f) != sizeof header ||
        memcmp(header, magic, sizeof magic) != 0) {
        snprintf(error, error_size, "%s: not a weights file of chainer-compiler emit-c", path);
    } else if (read_u64(header + 8) != fingerprint || read_u64(header + 16) != nbytes) {
        snprintf(error, error_size, "%s: the weights of another model (layout fingerprint or "
                 "size differ)", path);
    } else if (!(weights = ccn_alloc_lines(nbytes, block))) {
        snprintf(error, error_size, "%s: out of memory for %llu bytes", path,
                 (unsigned long long)nbytes);
    } else if (fread(weights, 1, (size_t)nbytes, f) != (size_t)nbytes || fgetc(f) != EOF) {
        snprintf(error, error_size, "%s: truncated or too long (expected %llu bytes of "
                 "weights)", path, (unsigned long long)nbytes);
        free(*block);
        *block = weights = NULL;
    }
    fclose(f);
    return weights;
}
