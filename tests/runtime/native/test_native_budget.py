"""runtime/native/ has a size budget of its own (docs/native.md says why it
lives in the runtime), counted as tests/runtime/test_line_budget.py counts."""
from tests.runtime.test_line_budget import RUNTIME, _total

#: Code lines of runtime/native/**/*.py: the emitter, fusion, folding, the
#: arena, the runner and the lowerings (3,613 when the budget was set).
#: + 60: the runner's thread count (library.py: the machine's CPUs and cgroup
#: quota, $CHAINER_COMPILER_THREADS, the pool's build flags).
#: + 50: depthwise convolutions (lowerings/depthwise.py) and SiLU fused
#: into one Swish (fusion.py).
#: + 275: what real models run (issue 31): IsNaN and IsInf, GatherND,
#: Resize in every mode (its per-axis tables), 1-D convolution and pooling
#: (a unit height), 3-D convolution, transposed convolution and pooling,
#: GlobalMaxPool, and the refusal that lowers on past a refused instruction
#: to list them all.
#: + 30: the Makefile's builds of the products for x86-64-v3 and -v4
#: (render.gemm_variant and its rules).
#: + 50: LayerNormalization's gradient (lowerings/normalization.py), for a
#: Transformer block's training on native (issue 33).
NATIVE_BUDGET = 3800 + 60 + 50 + 275 + 30 + 50

#: + 50: Concat written in place by its producers (plan._place_parts,
#: Step.parts), Transposes that move only axes of size 1 as views, and the
#: refusal of a Program writing a register twice (plan._check_single_writes).
NATIVE_BUDGET += 50

#: + 40: backend 'auto' (auto.py: every instruction lowered or evaluated at
#: emit time, without building C).  + 150: emit-c --max (batched.py: the
#: proof that a model keeps its samples apart, and NAME_run_n in render.py).
NATIVE_BUDGET += 40 + 150

#: + 30: the emitter as one module per stage (lower.py, plan.py, render.py;
#: errors.py), which costs their imports (issue 30).
NATIVE_BUDGET += 30

#: + 30: Resize of an image's last two axes as one ccn_resize_2d
#: (lowerings/array.py's _resize_2d: the order of its passes), issue 31.
NATIVE_BUDGET += 30

#: + 45: broadcast operands' axes merged (lowerings/math.py's merged_axes: an
#: SE scale runs whole planes), wide MaxPool windows sent to ccn_pool3d
#: (lowerings/pooling.py) and ReduceMean over trailing axes as
#: GlobalAveragePool (lowerings/reduction.py), issue 31.
NATIVE_BUDGET += 45

#: + 85: emit-c --max following the batch axis through the program
#: (batched.py: transposes, reshapes, recurrences' layouts) and NAME_run_n
#: copying the samples of inputs and outputs whose batch is not the first
#: axis (render.py), issue 33.
NATIVE_BUDGET += 85

#: + 125: GELU written out as nodes fused into one Gelu (recognised by
#: evaluating the nodes against Gelu's values) and a Linear layer's bias Add
#: made the MatMul's third input (fusion.py, lowerings/connection.py),
#: issue 31.
NATIVE_BUDGET += 125

#: + 60: a ResNet block's residual Add fused into the Conv before it
#: (fusion.py's _fuse_residual; the residual input of the Conv and
#: Winograd lowerings, its shape checked, the pass after the depthwise and
#: dilated ones in lowerings/connection.py), issue 31.
NATIVE_BUDGET += 60

#: + 5: the products' packed layouts in gemm_layout.py, which the
#: convolution, Winograd and recurrent lowerings share (Winograd imported
#: them from the convolution lowering, which imports Winograd), issue 30.
NATIVE_BUDGET += 5

#: + 40: the fusion rules run for the VM too (issue 30): each backend's
#: share of fusion_rules.RULES, sub-programs fused, registers renumbered,
#: the constants folded away dropped.
NATIVE_BUDGET += 40

#: + 105: emit-c --max runs chunks of samples on programs emitted for
#: batches 1, 2, 4... up to 64 (bucket_sizes; emit_c's _plan_buckets,
#: render's bucket functions sharing the weights and one arena), issue 33.
NATIVE_BUDGET += 105

#: + 50: direct convolutions (lowerings/conv_direct.py: the rule that sends
#: strided many-tap convolutions to ccn_conv_direct.c, its weight blocks and
#: padded planes), issue 31.
NATIVE_BUDGET += 50

#: + 20: the strips' bias at the first store (ccn_gemm_strips_set) and Gelu
#: as a product epilogue, written-out GELU fused into its product, issue 31.
NATIVE_BUDGET += 20


#: + 5: the unit-height view of a 1-D Conv lifts its constant weights too
#: (lowering._UnitHeight.const), for the direct kernel.
NATIVE_BUDGET += 5

#: + 20: what a native call holds, for the memory model (NativeRun.call_bytes,
#: resident_bytes) and the pool's check of an arena that is kept only once a
#: call used it (ArenaPool.check), issue 34.
NATIVE_BUDGET += 20

#: + 26: an activation fused into its product through a Reshape, Flatten,
#: Squeeze or Unsqueeze between them (fusion._view_activated: the dynamo
#: exporter's Gemm, Reshape, GELU), issue 31.
NATIVE_BUDGET += 26

#: + 118: attention as one instruction (fusion._fuse_attention: MatMul, scale,
#: mask, Softmax, MatMul; lowerings/attention.py), issue 31.
NATIVE_BUDGET += 118

#: + 9: a batched MatMul's large products one by one by the blocked GEMM
#: (lowerings/connection.py, BLOCKED_PRODUCT_MACS), issue 31.
NATIVE_BUDGET += 9


#: + 2: a batch's 1x1 convolutions of constant weights image by image, in
#: place (lowerings/connection.py, ccn_gemm_panels_images), issue 31.
NATIVE_BUDGET += 2

#: + 9: an inference BatchNormalization's activation as its epilogue
#: (fusion.NORM_EPILOGUES, lowerings/normalization.py: DenseNet's
#: pre-activation), issue 31.
NATIVE_BUDGET += 9

#: + 28: a Concat whose inputs begin a later Concat's placed as that one's
#: first block (plan._prefix_concats, _place_prefixes: torchvision's
#: DenseNet layers), issue 31.
NATIVE_BUDGET += 28

#: + 8: dilated 3x3 convolutions through Winograd per phase of the input
#: (lowerings/winograd.py: phases, the blocks' least tiles), issue 31.
NATIVE_BUDGET += 8

#: + 32: an average pool after a 1x1 Conv run before it (fusion._pool_first:
#: DenseNet's transitions multiply a quarter of the pixels), issue 31.
NATIVE_BUDGET += 32

#: + 2: pool_first keeps the weights' readers at the moved Conv, issue 31.
NATIVE_BUDGET += 2

#: + 3: the arena planned in two orders, the smaller kept (arena.py: the
#: native training step's peak), issue 34.
NATIVE_BUDGET += 3

#: + 5: the few-channel stem read a row at a time (lowerings/conv_direct.py:
#: which direct convolutions are stems, their lines' size), issue 31.
NATIVE_BUDGET += 5

#: + 18: Winograd's shallow products (lowerings/winograd.py: which
#: convolutions, their blocks of tiles), issue 31.
NATIVE_BUDGET += 18

#: + 207: NCHWc through chains of mobile convolutions (blocked.py, the
#: chain selection; lowerings/nchwc.py; the hook in emit_c.py), issue 31
#: item 4.
NATIVE_BUDGET += 207

#: + 2: ConvGradFilter's scratch, a bounded gy per product and the parts
#: of gw^T (lowerings/connection.py: GRAD_GY_FLOATS), issue 34.
NATIVE_BUDGET += 2

#: + 79: squeeze-excitation on NCHWc blocks (blocked.py: the folded Muls,
#: the pools in chains; lowerings/nchwc.py: NchwcGlobalAveragePool, the
#: products' scale), issue 31.
NATIVE_BUDGET += 79

#: + 3: Winograd's few-tiles rule (lowerings/winograd.py: FEW_TILES; 7- and
#: 8-wide 3x3 layers at batch 1 to im2col), issue 31.
NATIVE_BUDGET += 3

#: + 73: the stem into NCHWc blocks (blocked.py: the stems a
#: chain reads at no reorder; lowerings/nchwc.py: NchwcStemConv;
#: lowerings/conv_direct.py: is_stem, stem_conv, lane_blocks), issue 31.
NATIVE_BUDGET += 73

#: + 9: Winograd's direct rule (lowerings/winograd.py: DIRECT_MAX_TILES,
#: DIRECT_MAX_OUTPUTS; lowerings/connection.py passes takes_direct), issue 31.
NATIVE_BUDGET += 9

#: + 72: ConvNeXt's permute back folded into its layer scale and residual
#: (channels_last.py; lowerings/normalization.py: ChannelsFirstScaleAdd;
#: the hook in emit_c.py), issue 31 item 4.
NATIVE_BUDGET += 72

#: + 64: ConvNeXt's depthwise Conv written channels-last (channels_last.py:
#: the Conv + Transpose rule; lowerings/depthwise.py: band_rows with its
#: bands, DepthwiseConvNhwc), issue 31 item 4.
NATIVE_BUDGET += 64


#: + 8: emit-c's static arenas start at a 64-byte line (render.py:
#: _at_a_line, _line_padded_doubles), issue 31's default-built executable.
NATIVE_BUDGET += 8

#: + 3: the depthwise kernel's band chosen once, at emit time
#: (lowerings/depthwise.py's band_rows, passed to ccn_conv2d_depthwise).
NATIVE_BUDGET += 3

#: + 27: ResNet's bottlenecks on NCHWc blocks (blocked.py: dense Convs
#: join chains, a chain chosen by what its products save against its
#: reorders; lowerings/nchwc.py: ccn_nchwc_dense), issue 31.
NATIVE_BUDGET += 27

#: + 40: SqueezeNet's fire modules on NCHWc blocks (blocked.py: a Concat of
#: whole blocks in a chain, the members found in program order; a dense
#: Conv's saving counting the lanes the direct kernel would lose,
#: conv_direct.direct_lane_use) and products of half a block
#: (MIN_PRODUCT_CHANNELS), issue 31.
NATIVE_BUDGET += 40

#: + 38: MaxPools on NCHWc blocks (blocked.py: _block_pool, a pool of a
#: 3x3 stem or of a chain's value joining it; lowerings/nchwc.py:
#: NchwcMaxPool) and the dense 3x3s of few input channels taken from
#: Winograd (WINOGRAD_BLOCKED_INPUT): SqueezeNet on blocks from its stem,
#: issue 31.
NATIVE_BUDGET += 38

#: + 2: a classifier's mean over each plane (ReduceMean over axes 2 and 3,
#: MNASNet's) on NCHWc blocks like a GlobalAveragePool (blocked.py:
#: _plane_mean, 17 lines), less the dot-product paths of constant
#: weights (Gemm and MatMul of a few rows now read strips; 15 lines
#: removed), issue 31.
NATIVE_BUDGET += 2

#: + 10: each run on the thread count its function's runs are fastest on
#: (library.thread_count: a count fixed or the most; render.py: the run
#: functions' ccn_run_start and ccn_run_finish), issue 31.
NATIVE_BUDGET += 10

#: + 5: grouped Convs of whole blocks of 8 output channels direct
#: (conv_direct.takes_direct's group_outputs; a grouped Conv never a stem),
#: RegNetY-400MF's groups of 8, issue 31.
NATIVE_BUDGET += 5

#: + 18: the dense 3x3 stride-1 Convs on NCHWc blocks by Winograd's
#: F(4x4, 3x3) and F(2x2, 3x3) (lowerings/nchwc.py: winograd_filters, the
#: kernel and tile chosen; lowerings/winograd.py: filter_transforms shared
#: with the NCHW Winograd), SqueezeNet's expand layers, ResNet's 3x3s of
#: 64 and 128 channels in chains, issue 31.
NATIVE_BUDGET += 18


def test_the_native_backend_stays_within_its_budget():
    used = _total((RUNTIME / 'native').rglob('*.py'))
    assert used <= NATIVE_BUDGET, ('runtime/native/ has %d code lines, budget %d'
                                   % (used, NATIVE_BUDGET))
