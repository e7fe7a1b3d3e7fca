"""The NCHWc pass of the native backend: chains of convolutions (mobile
ones, ResNet's bottlenecks) run in a blocked channel layout, converted
only at the chain's edges.

After fusion (fusion.py), a Conv whose weights and bias are constants
and that is a 1x1 product (stride 1, no padding), a depthwise 3x3 or 5x5
(strides 1 or 2, any padding, no dilation) or a dense 1x1 or 3x3
(strides 1 or 2, any padding, no dilation) that Winograd would not run
(or of at most WINOGRAD_BLOCKED_INPUT input channels), of at least
MIN_CHANNELS channels (MIN_PRODUCT_CHANNELS in and out of a product or
dense one), with any epilogue and residual fusion gave it, may run as
NchwcConv (lowerings/nchwc.py, kernels/ccn_nchwc.c) on tensors of shape
(N, ceil(C / BLOCK), H, W, BLOCK). Such Convs that read each other's
outputs (as input or residual) form a chain, with a Concat along the
channels of tensors of whole blocks that one of them makes (on blocks
the same Concat along axis 1, which its producers write in place) and a
2-D MaxPool of one of their values (NchwcMaxPool); a chain that pays
(_pays: more depthwise Convs than values to reorder at its edges, or
more multiply-adds saved than reorders cost) runs blocked: an
NchwcReorderIn before it for each value it reads from outside, an
NchwcReorderOut after a Conv whose value something outside the chain (or
the caller) reads.
One 1x1 product and the depthwise after it then share a layout with no
repacking (onnxruntime's MLAS runs every convolution so;
benchmarks/NOTES.md, "NCHWc through mobile chains").

A chain's input that a stem makes (a Conv of ccn_conv2d_direct's stem
path: lowerings/conv_direct.py's stem_conv) and only the chain reads
costs no reorder: the stem runs as NchwcStemConv, writing blocks
(benchmarks/NOTES.md, "The stem into NCHWc blocks").

The pass reads the static shapes of the Program's types; without them it
changes nothing.
"""
import dataclasses
import math

from ..ops.opset_rules import node_axes
from ..ops.registry import CUSTOM_DOMAIN
from ..program import NO_REGISTER, Instruction, Program, RegisterType
from .lowering import BLOCK, Refuse, blocked_shape, window
from .lowerings.conv_direct import direct_lane_use, stem_conv, takes_direct
from .lowerings.nchwc import WINOGRAD_MAX_IN_BLOCKS
from .lowerings.winograd import winograd_tiles

#: Fewest channels of a depthwise Conv that runs blocked, and in and out of
#: a product or dense one: below, most of a block is padding.  A product
#: of half a block keeps its chain whole (MNASNet-0.5's 16 -> 8 -> 24 at
#: 112x112: no reorder of 24 channels, 1.02x -> 1.01x onnxruntime's time);
#: a depthwise one of 8 channels costs twice its lanes (LCNet-0.5's at
#: 112x112: 0.75x -> 0.82x).
MIN_CHANNELS = 16
MIN_PRODUCT_CHANNELS = 8
#: The depthwise kernels and strides ccn_nchwc_depthwise unrolls.
DEPTHWISE_KERNELS = (3, 5)
DEPTHWISE_STRIDES = (1, 2)
#: The dense kernels and strides ccn_nchwc_dense runs (ResNet's 3x3 and
#: its 1x1 stride-2 downsamples; a 1x1 stride-1 one is a product).
DENSE_KERNELS = (1, 3)
DENSE_STRIDES = (1, 2)
#: What a product or dense Conv saves on blocks, per multiply-add, and what
#: a reorder costs per value, both in the time of a multiply-add on NCHW
#: (ResNet-50's Convs, one thread: 0.93x their NCHW time on blocks, at
#: about 50 GMAC/s; a reorder 0.4-1.1 ns a value, the most for tensors
#: past L2; DenseNet-121's 1x1 + 3x3 pairs at 28x28, 330 multiply-adds a
#: value reordered, and FCN-ResNet-50's lone 512 -> 2048 at 28x28, 410,
#: lost; benchmarks/NOTES.md).
DENSE_SAVING = 0.07
REORDER_COST = 32
#: A product's or dense Conv's tile reads every input block at its pixels:
#: past DEEP_BLOCKS blocks, an image's input of more than DEEP_INPUT floats
#: stays NCHW (FCN-ResNet-50's 2048 -> 512 at 65x65: 2.5x the GEMM's time;
#: ResNet-50's 1.6 MiB of 512 channels at 28x28 gain).
DEEP_BLOCKS = 16
DEEP_INPUT = 1 << 19
#: Most input channels of a dense Conv that runs blocked where Winograd
#: would run on NCHW: as many as the blocks' Winograd takes, whose F(4x4,
#: 3x3) took less time than the NCHW one's (64 -> 64 at 56x56 0.31 ms
#: against 0.39; 128 -> 128 at 28x28 0.32 against 0.34) and needs no
#: reorders around it.
WINOGRAD_BLOCKED_INPUT = WINOGRAD_MAX_IN_BLOCKS * BLOCK


def _static(program: Program, r: int) -> tuple[int, ...] | None:
    """Register ``r``'s static float32 shape, None when not known."""
    t = program.types.get(r)
    if t is None or t.kind != 'tensor' or t.dtype != 'float32' or t.shape is None:
        return None
    dims = tuple(d for d in t.shape if isinstance(d, int))
    return dims if len(dims) == len(t.shape) else None


def _known(program: Program, r: int) -> tuple[int, ...]:
    """Register ``r``'s static shape (blockable checked it has one)."""
    shape = _static(program, r)
    assert shape is not None
    return shape


def _blocked_type(program: Program, r: int) -> RegisterType:
    """The type of register ``r`` (of a static shape) blocked."""
    return RegisterType('tensor', 'float32', blocked_shape(_known(program, r)))


def blockable(program: Program, inst: Instruction) -> bool:
    """Whether Conv ``inst`` may run as NchwcConv (see the module)."""
    if inst.op != 'Conv' or inst.domain not in ('', 'ai.onnx') or len(inst.inputs) < 2:
        return False
    x, w = _static(program, inst.inputs[0]), program.constants.get(inst.inputs[1])
    bias = inst.inputs[2] if len(inst.inputs) > 2 else NO_REGISTER
    y = _static(program, inst.outputs[0])
    if x is None or len(x) != 4 or y is None or w is None or w.ndim != 4 or \
            (bias != NO_REGISTER and bias not in program.constants):
        return False
    if len(inst.inputs) > 3 and inst.inputs[3] != NO_REGISTER and \
            _static(program, inst.inputs[3]) is None:
        return False
    (_, c, h, wd), (m, cg, kh, kw) = x, w.shape
    group = int(inst.attrs.get('group', 1))
    try:
        win = window(inst.attrs, (h, wd), (kh, kw))
    except Refuse:
        return False
    if min(c, m) < (MIN_PRODUCT_CHANNELS if group == 1 else MIN_CHANNELS) or \
            win.dilations != (1, 1):
        return False
    if group == 1 and c > DEEP_BLOCKS * BLOCK and c * h * wd > DEEP_INPUT:
        return False
    if group == 1 and cg == c:  # a 1x1 product or a dense convolution
        # Not one the NCHW Winograd runs (about 0.8x the dense kernel's time
        # at ResNet-50's 3x3 of 14x14-56x56, benchmarks/NOTES.md), but of
        # as few input channels as the blocks' Winograd takes.
        return kh == kw and kh in DENSE_KERNELS and \
            win.strides[0] == win.strides[1] and win.strides[0] in DENSE_STRIDES and \
            (c <= WINOGRAD_BLOCKED_INPUT or winograd_tiles(
                x[0], c, m, win.out, (kh, kw), win.strides, win.dilations, 1, phases=True,
                direct=takes_direct(True, 1, m, (kh, kw), win.strides, win.dilations,
                                    win.out[1])) is None)
    return group == c == m and cg == 1 and kh == kw and kh in DEPTHWISE_KERNELS and \
        win.strides[0] == win.strides[1] and win.strides[0] in DEPTHWISE_STRIDES


def _stems(program: Program) -> dict[int, int]:
    """The Convs that may run as NchwcStemConv, by the register they
    make: stem_conv's, with constant weights and bias, no residual, and
    not a program output."""
    found = {}
    outputs = {v.register for v in program.outputs}
    for i, inst in enumerate(program.instructions):
        if inst.op != 'Conv' or inst.domain not in ('', 'ai.onnx') or \
                not 2 <= len(inst.inputs) <= 3 or inst.outputs[0] in outputs:
            continue
        x, y = _static(program, inst.inputs[0]), _static(program, inst.outputs[0])
        w = program.constants.get(inst.inputs[1])
        b = program.constants.get(inst.inputs[2]) if len(inst.inputs) > 2 else None
        if x is None or y is None or w is None or (len(inst.inputs) > 2 and (
                b is None or b.shape != w.shape[:1])):
            continue
        sizes = stem_conv(x, w.shape, inst.attrs)
        if sizes is not None and (sizes[0], sizes[4]) + sizes[5:] == y:
            found[inst.outputs[0]] = i
    return found


def chains(program: Program) -> list[set[int]]:
    """The instruction indices of each chain that runs blocked: blockable
    Convs linked by the values they read (input 0, the residual 3, the
    tensor of a squeeze-excitation's Mul folded into a 1x1 product), with
    the GlobalAveragePools, MaxPools and Concats of their outputs, that pay
    (_pays)."""
    insts = program.instructions
    scales = _scales(program)
    reads = _blocked_reads(program, scales)
    # In program order, so that a value's producer is known before its
    # readers: a Conv always, a pool or Concat when it reads a member's value
    # (a Concat of values made elsewhere stays out, and so do its readers'
    # links to it).  A MaxPool of a 3x3 stem joins too, the stem then
    # writing blocks (SqueezeNet's; ResNet's 7x7 stem took 1.25x its NCHW
    # time on blocks).
    small_stems = {r for r, k in _stems(program).items()
                   if program.constants[insts[k].inputs[1]].shape[2:] == (3, 3)}
    producer: dict[int, int] = {}
    members = []
    for i in sorted(reads):
        if insts[i].op == 'Conv' or any(
                r in producer or (insts[i].op == 'MaxPool' and r in small_stems)
                for r in reads[i]):
            members.append(i)
            if insts[i].op in ('Conv', 'Concat', 'MaxPool'):
                producer[insts[i].outputs[0]] = i
    parent = {i: i for i in members}

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in members:
        for r in reads[i]:
            if r in producer:
                parent[root(i)] = root(producer[r])
    groups: dict[int, set[int]] = {}
    for i in members:
        groups.setdefault(root(i), set()).add(i)
    return [g for g in groups.values() if _pays(program, g, _edges(program, g, reads, scales))]


def _product(program: Program, inst: Instruction) -> bool:
    """Whether blockable Conv ``inst`` is a 1x1 product (stride 1, no
    padding: ccn_nchwc_pointwise's, which alone folds a scale)."""
    x, y = _known(program, inst.inputs[0]), _known(program, inst.outputs[0])
    return int(inst.attrs.get('group', 1)) == 1 and x[2:] == y[2:] and \
        program.constants[inst.inputs[1]].shape[2:] == (1, 1) and \
        tuple(inst.attrs.get('strides', (1, 1))) == (1, 1)


def _pays(program: Program, chain: set[int], edges: set[int]) -> bool:
    """Whether ``chain`` gains from blocks more than its ``edges`` cost:
    more depthwise Convs than edges (the mobile chains), or its other Convs'
    multiply-adds, times DENSE_SAVING plus the share of lanes the direct
    kernel would lose on NCHW, more than REORDER_COST per value reordered
    (ResNet's bottlenecks, SqueezeNet's fire modules at 13x13)."""
    convs = [program.instructions[i] for i in chain if program.instructions[i].op == 'Conv']
    depthwise = sum(int(inst.attrs.get('group', 1)) > 1 for inst in convs)
    saved = 0.0
    for inst in convs:
        if int(inst.attrs.get('group', 1)) == 1:
            x, w = _known(program, inst.inputs[0]), program.constants[inst.inputs[1]].shape
            macs = math.prod(_known(program, inst.outputs[0])) * math.prod(w[1:])
            saved += macs * (DENSE_SAVING + 1 - direct_lane_use(x, w, inst.attrs))
    values = sum(math.prod(_known(program, r)) for r in edges)
    return depthwise > len(edges) or saved > REORDER_COST * values


def _scales(program: Program) -> dict[int, int]:
    """The squeeze-excitation Muls a 1x1 product may fold, by the product:
    a Mul of an (N, C, H, W) tensor by an (N, C, 1, 1) one whose result
    only that product reads, as its input."""
    insts = program.instructions
    readers: dict[int, list[int]] = {}
    for i, inst in enumerate(insts):
        for r in set(inst.inputs + inst.captures):
            readers.setdefault(r, []).append(i)
    found = {}
    for i, inst in enumerate(insts):
        if inst.op != 'Mul' or inst.domain not in ('', 'ai.onnx') or len(inst.inputs) != 2:
            continue
        y = _static(program, inst.outputs[0])
        to = readers.get(inst.outputs[0], [])
        if y is None or len(y) != 4 or y[2] * y[3] == 1 or len(to) != 1 or \
                inst.outputs[0] in {v.register for v in program.outputs}:
            continue
        conv = insts[to[0]]
        shapes = [_static(program, r) for r in inst.inputs]
        if sorted(shapes, key=str) == sorted([y, y[:2] + (1, 1)], key=str) and \
                blockable(program, conv) and _product(program, conv) and \
                conv.inputs[0] == inst.outputs[0] and inst.outputs[0] not in conv.inputs[1:]:
            found[to[0]] = i
    return found


def _blocked_reads(program: Program, scales: dict[int, int]) -> dict[int, list[int]]:
    """The registers each blockable Conv and GlobalAveragePool would read
    blocked, by instruction: a Conv's input 0 (a folded Mul's tensor in
    its place: ``scales``, the folded Muls) and residual, a pool's input."""
    insts = program.instructions
    reads = {}
    for i, inst in enumerate(insts):
        if i in scales:
            mul = insts[scales[i]]
            x = mul.inputs[0] if _static(program, mul.inputs[0]) == \
                _static(program, mul.outputs[0]) else mul.inputs[1]
            reads[i] = [x] + _chained_inputs(inst)[1:]
        elif blockable(program, inst):
            reads[i] = _chained_inputs(inst)
        elif _plane_mean(program, inst):
            reads[i] = [inst.inputs[0]]
        elif _block_concat(program, inst):
            reads[i] = list(inst.inputs)
        elif _block_pool(program, inst):
            reads[i] = [inst.inputs[0]]
    return reads


def _plane_mean(program: Program, inst: Instruction) -> bool:
    """Whether ``inst`` averages each channel of a static 4-D tensor over
    its whole plane: a GlobalAveragePool, or a ReduceMean over axes 2 and 3
    with or without them kept (torchvision's MNASNet ends in ``x.mean([2,
    3])``, which took a reorder out of blocks first).  On blocks,
    NchwcGlobalAveragePool, whose lowering takes the channels from the
    output's type."""
    if inst.domain not in ('', 'ai.onnx') or inst.op not in ('GlobalAveragePool', 'ReduceMean'):
        return False
    x, y = _static(program, inst.inputs[0]), _static(program, inst.outputs[0])
    if x is None or len(x) != 4 or y not in (x[:2] + (1, 1), x[:2]):
        return False
    if inst.op == 'GlobalAveragePool':
        return y == x[:2] + (1, 1)
    given = program.constants.get(inst.inputs[1]) if len(inst.inputs) > 1 else None
    axes = node_axes(inst.op, inst.version, inst.attrs,
                     lambda: None if given is None else given.reshape(-1))
    return axes is not None and sorted(a % 4 for a in axes) == [2, 3]


def _block_pool(program: Program, inst: Instruction) -> bool:
    """Whether ``inst`` is a 2-D MaxPool without dilation or Indices of a
    static 4-D tensor: on blocks, NchwcMaxPool (16 channels a vector,
    where ccn_maxpool2d's rows of one plane took 1.8x onnxruntime's time
    on SqueezeNet's pools of blocks)."""
    if inst.op != 'MaxPool' or inst.domain not in ('', 'ai.onnx') or \
            any(r != NO_REGISTER for r in inst.outputs[1:]):
        return False
    x, y = _static(program, inst.inputs[0]), _static(program, inst.outputs[0])
    return x is not None and len(x) == 4 and y is not None and len(y) == 4 and \
        len(inst.attrs.get('kernel_shape') or ()) == 2 and \
        tuple(inst.attrs.get('dilations') or (1, 1)) == (1, 1)


def _block_concat(program: Program, inst: Instruction) -> bool:
    """Whether ``inst`` is a Concat of 4-D tensors along their channels
    whose every input has whole blocks of channels: on blocks, the same
    Concat along axis 1 (the blocks), which its producers may write in
    place (SqueezeNet's fire modules)."""
    if inst.op != 'Concat' or inst.domain not in ('', 'ai.onnx') or not inst.inputs:
        return False
    shapes = [_static(program, r) for r in inst.inputs]
    y = _static(program, inst.outputs[0])
    if y is None or len(y) != 4 or int(inst.attrs.get('axis', 0)) not in (1, -3):
        return False
    return all(x is not None and len(x) == 4 and x[1] % BLOCK == 0 and
               x[:1] + x[2:] == y[:1] + y[2:] for x in shapes)


def _edges(program: Program, chain: set[int], reads: dict[int, list[int]],
           scales: dict[int, int]) -> set[int]:
    """The registers ``chain`` reorders: values it reads from outside,
    values it makes that something outside reads."""
    made = {program.instructions[i].outputs[0] for i in chain
            if program.instructions[i].op in ('Conv', 'Concat', 'MaxPool')}
    read = {r for i in chain for r in reads[i]}
    outside = _outside(program, chain, reads, scales)
    # A stem only the chain reads writes blocks: no reorder.
    stems = {r for r in _stems(program) if r not in outside}
    return (read - made - stems) | (made & outside)


def _outside(program: Program, chosen: set[int], reads: dict[int, list[int]],
             scales: dict[int, int]) -> set[int]:
    """The registers read other than blocked by ``chosen`` (a program
    output counts as read; a Mul folded into a chosen product reads
    nothing)."""
    folded = {m for c, m in scales.items() if c in chosen}
    outside = {v.register for v in program.outputs}
    for i, inst in enumerate(program.instructions):
        passed = reads[i] if i in chosen else []
        if i not in folded:
            outside.update(r for r in inst.inputs + inst.captures if r not in passed)
    return outside


def _chained_inputs(inst: Instruction) -> list[int]:
    """The inputs of a Conv a chain passes blocked: x and the residual."""
    return [inst.inputs[k] for k in (0, 3)
            if k < len(inst.inputs) and inst.inputs[k] != NO_REGISTER]


def block_chains(program: Program) -> Program:
    """``program`` with its chains (``chains``) as NchwcConv,
    NchwcGlobalAveragePool, NchwcMaxPool and Concat of blocks between
    NchwcReorderIn and NchwcReorderOut, a folded Mul's scale as its
    product's input 4; the same object when it has none."""
    found = chains(program)
    if not found:
        return program
    chosen = set().union(*found)
    insts = program.instructions
    all_scales = _scales(program)
    reads = _blocked_reads(program, all_scales)
    scales = {c: insts[m] for c, m in all_scales.items() if c in chosen}
    folded = {m.outputs[0] for m in scales.values()}
    # A value a chain makes keeps its register when only the chain reads
    # it; otherwise the chain writes a blocked copy, reordered after it.
    outside = _outside(program, chosen, reads, all_scales)
    read = {r for i in chosen for r in reads[i]}
    stems = {i for r, i in _stems(program).items() if r in read and r not in outside}
    types = dict(program.types)
    count = program.num_registers
    blocked: dict[int, int] = {}
    rewritten = []

    def new_register(like: int) -> int:
        nonlocal count
        types[count] = _blocked_type(program, like)
        count += 1
        return count - 1

    for i, inst in enumerate(insts):
        if i in stems:
            y = blocked[inst.outputs[0]] = inst.outputs[0]
            types[y] = _blocked_type(program, y)
            rewritten.append(dataclasses.replace(inst, op='NchwcStemConv', domain=CUSTOM_DOMAIN))
            continue
        if i not in chosen:
            if not (inst.op == 'Mul' and inst.outputs[0] in folded):
                rewritten.append(inst)
            continue
        for r in reads[i]:
            if r not in blocked:  # from outside the chain
                blocked[r] = new_register(r)
                rewritten.append(Instruction('NchwcReorderIn', (r,), (blocked[r],),
                                             domain=CUSTOM_DOMAIN, name=inst.name))
        if inst.op in ('GlobalAveragePool', 'ReduceMean'):
            rewritten.append(dataclasses.replace(inst, op='NchwcGlobalAveragePool',
                                                 domain=CUSTOM_DOMAIN, attrs={},
                                                 inputs=(blocked[reads[i][0]],)))
            continue
        y = inst.outputs[0]
        yb = new_register(y) if y in outside else y
        if yb == y:
            types[y] = _blocked_type(program, y)
        blocked[y] = yb
        if inst.op == 'Concat':
            rewritten.append(dataclasses.replace(
                inst, inputs=tuple(blocked[r] for r in inst.inputs), outputs=(yb,),
                attrs={**inst.attrs, 'axis': 1}))
        elif inst.op == 'MaxPool':
            rewritten.append(dataclasses.replace(inst, op='NchwcMaxPool', domain=CUSTOM_DOMAIN,
                                                 inputs=(blocked[reads[i][0]],), outputs=(yb,)))
        else:
            inputs = list(inst.inputs)
            inputs[0] = blocked[reads[i][0]]
            if len(inputs) > 3 and inputs[3] != NO_REGISTER:
                inputs[3] = blocked[inputs[3]]
            if i in scales:
                mul = scales[i]
                inputs += [NO_REGISTER] * (4 - len(inputs)) + [
                    mul.inputs[1] if reads[i][0] == mul.inputs[0] else mul.inputs[0]]
            rewritten.append(dataclasses.replace(inst, op='NchwcConv', domain=CUSTOM_DOMAIN,
                                                 inputs=tuple(inputs), outputs=(yb,)))
        if yb != y:
            rewritten.append(Instruction('NchwcReorderOut', (yb,), (y,), domain=CUSTOM_DOMAIN,
                                         name=inst.name))
    return dataclasses.replace(program, instructions=rewritten, types=types,
                               num_registers=count)
