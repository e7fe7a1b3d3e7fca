"""The layouts of ccn_gemm.h's packed operands, shared by every lowering
that lays a constant out at emit time for the products (convolutions,
Winograd's transformed filters, the recurrent cells' R): the constants
mirror the header's (test_kernel_contract checks them)."""
import numpy

#: The panel and strip layouts of ccn_gemm.h (CCN_PANEL_ROWS,
#: CCN_STRIP_COLS, CCN_KC): rows of a panel of A, columns of a strip of B
#: and depth of a slice.
PANEL_ROWS = 24
STRIP_COLS = 32
PANEL_DEPTH = 256
#: Rows of a product from which the kernels pack their operands
#: (ccn_gemm.c's CCN_SMALL_M): only then do emit-time layouts spare
#: work.
PANEL_MIN_ROWS = 4


def pack_panels(a, rows=PANEL_ROWS) -> numpy.ndarray:
    """The M x K float32 matrix ``a`` in the panel layout of
    ccn_gemm.h: rows padded with zeros to whole panels of ``rows``,
    then for each PANEL_DEPTH-deep slice of columns and each panel, the
    slice's columns one after the other, each holding the panel's rows.
    The strip layout of a K x N matrix B is that of B.T with STRIP_COLS."""
    M, K = a.shape
    padded = numpy.zeros((-(-M // rows) * rows, K), numpy.float32)
    padded[:M] = a
    panels = padded.reshape(-1, rows, K)
    return numpy.concatenate([panels[:, :, k0:k0 + PANEL_DEPTH].transpose(0, 2, 1).ravel()
                              for k0 in range(0, K, PANEL_DEPTH)])
