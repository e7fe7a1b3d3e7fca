/* ccn_conv_direct.h: Conv_direct family: a 2-D convolution (one group,
 * or groups of a multiple of CCN_DIRECT_ROWS output channels; stride 1 or
 * 2 on both axes, no dilation) summed in registers from a padded copy of
 * the input, without im2col's columns. */
#ifndef CCN_CONV_DIRECT_H
#define CCN_CONV_DIRECT_H

#include "ccn_common.h"
#include "ccn_connection.h"

CCN_BEGIN_DECLS

/* Output channels per block of the weights' layout (every instruction set
 * computes blocks of this many rows). */
#define CCN_DIRECT_ROWS 8
/* Most taps (kernel_h * kernel_w) a direct convolution has. */
#define CCN_DIRECT_MAX_TAPS 64
/* Floats read past the last channel's plane, beyond `row + kernel_w`: the
 * widest tile (three vectors of 16). */
#define CCN_DIRECT_TILE 64

/* The stem path's input lines (ccn_conv_direct_plan's stem): floats past
 * each phase's `row` (the widest tile's last vector), and most floats of
 * them all (a stack array: lowerings/conv_direct.py sends no wider
 * convolution there). */
#define CCN_DIRECT_STEM_TAIL 16
#define CCN_DIRECT_STEM_FLOATS 16384

/* How a direct convolution lays out its input: decided when the C is
 * emitted, where its scratch is sized (DIRECT_PLAN in
 * lowerings/conv_direct.py).  Each channel of an image is copied into
 * `plane` floats of scratch: its padded image (stride 1), or the four
 * phases of it (stride 2: (row, column) parity (0, 0), (0, 1), (1, 0),
 * (1, 1), each `rows` rows of `row` floats), zeros around the input.
 * With `stem` (few input channels) nothing goes to scratch: each output
 * row copies the KH input rows of each channel it reads into C * KH lines
 * on the stack, each its `stride` phases of row + CCN_DIRECT_STEM_TAIL
 * floats. */
typedef struct {
    long stride;     /* 1 or 2, both axes */
    long rows, row;  /* rows of a padded plane (or phase) and floats per row */
    long plane;      /* floats per channel: rows * row * stride * stride */
    long stem;       /* 1: the input read a row at a time, scratch unused */
    long blocked;    /* 1 (stems only, no residual): y blocked, (N, ceil(M / 16), OH,
                      * OW, 16), the lanes past M zero (ccn_nchwc.h's layout), w in
                      * blocks of 16 output channels, [c][kh][kw][lane] */
    int act;         /* epilogue activation (CCN_ACT_*) */
    float act_alpha; /* its slope or bound */
} ccn_conv_direct_plan;

/* y = act(conv2d(x, w) + bias + residual), bias and residual (shaped as y)
 * optional (NULL).  w holds the weights (M, C / group, KH, KW) in blocks of
 * CCN_DIRECT_ROWS output channels (M padded with zeros): block b's floats
 * are [c][kh][kw][row].  scratch holds C * plane + row + kernel_w +
 * CCN_DIRECT_TILE floats (none for a stem). */
void ccn_conv2d_direct(const ccn_conv_geometry *geometry, const ccn_conv_direct_plan *plan,
                       const float *x, const float *w, const float *bias, const float *residual,
                       float *y, float *scratch);

CCN_END_DECLS
#endif /* CCN_CONV_DIRECT_H */
