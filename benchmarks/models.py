"""The benchmark models, in Chainer.  Every other implementation
(hand-written NumPy, PyTorch) mirrors MLP, LeNet5 and ResNet18Style layer
for layer and takes its initial weights from them.  The models after
those (ResNet-50, VGG16, a deep MLP, a deep plain CNN, an LSTM classifier,
an MLP with Dropout) serve the memory benchmark (memory.py) and the
recompute policies' tests, in Chainer only."""
import chainer
import chainer.functions as F
import chainer.links as L
from chainer.links.model.vision.resnet import BuildingBlock


class MLP(chainer.ChainList):
    """Fully connected layers of the given sizes with ReLU between them,
    e.g. ``MLP([784, 100, 100, 10])``.  Layer i is ``self[i]``."""

    def __init__(self, sizes):
        super().__init__(*[L.Linear(n_in, n_out) for n_in, n_out in zip(sizes, sizes[1:])])
        self.sizes = list(sizes)

    def forward(self, x):
        for i, layer in enumerate(self):
            x = layer(x)
            if i + 1 < len(self):
                x = F.relu(x)
        return x


class LeNet5(chainer.Chain):
    """LeNet-5 on 1x28x28 images: two 5x5 convolutions (the first padded to
    keep 28x28) each followed by ReLU and 2x2 max pooling, then three fully
    connected layers 400-120-84-10 with ReLU between them."""

    def __init__(self, n_out=10):
        super().__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(1, 6, 5, pad=2)
            self.conv2 = L.Convolution2D(6, 16, 5)
            self.fc3 = L.Linear(16 * 5 * 5, 120)
            self.fc4 = L.Linear(120, 84)
            self.fc5 = L.Linear(84, n_out)

    def forward(self, x):
        h = F.max_pooling_2d(F.relu(self.conv1(x)), 2, 2)
        h = F.max_pooling_2d(F.relu(self.conv2(h)), 2, 2)
        h = F.relu(self.fc3(h))
        h = F.relu(self.fc4(h))
        return self.fc5(h)


class BasicBlock(chainer.Chain):
    """ResNet's basic block: conv3x3-BN-ReLU-conv3x3-BN plus the shortcut
    (identity, or conv1x1-BN where the shape changes), then ReLU.
    Convolutions have no bias (BatchNormalization supplies it)."""

    def __init__(self, in_channels, out_channels, stride):
        super().__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(in_channels, out_channels, 3, stride, 1, nobias=True)
            self.bn1 = L.BatchNormalization(out_channels)
            self.conv2 = L.Convolution2D(out_channels, out_channels, 3, 1, 1, nobias=True)
            self.bn2 = L.BatchNormalization(out_channels)
            self.projects = stride != 1 or in_channels != out_channels
            if self.projects:
                self.conv_s = L.Convolution2D(in_channels, out_channels, 1, stride, 0,
                                              nobias=True)
                self.bn_s = L.BatchNormalization(out_channels)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        shortcut = self.bn_s(self.conv_s(x)) if self.projects else x
        return F.relu(h + shortcut)


class ResNet18Style(chainer.Chain):
    """ResNet-18 for 3x32x32 images (the CIFAR layout): conv3x3-BN-ReLU with
    ``width`` channels, four stages of two BasicBlocks with width, 2x, 4x
    and 8x channels (stride 2 from the second stage on), 4x4 average
    pooling and a fully connected layer."""

    def __init__(self, width=64, n_out=10):
        super().__init__()
        widths = [width, 2 * width, 4 * width, 8 * width]
        with self.init_scope():
            self.conv0 = L.Convolution2D(3, width, 3, 1, 1, nobias=True)
            self.bn0 = L.BatchNormalization(width)
            blocks = []
            in_channels = width
            for stage, channels in enumerate(widths):
                for i in range(2):
                    stride = 2 if stage > 0 and i == 0 else 1
                    blocks.append(BasicBlock(in_channels, channels, stride))
                    in_channels = channels
            self.blocks = chainer.ChainList(*blocks)
            self.fc = L.Linear(widths[-1], n_out)

    def forward(self, x):
        h = F.relu(self.bn0(self.conv0(x)))
        for block in self.blocks:
            h = block(h)
        h = F.average_pooling_2d(h, 4)
        return self.fc(h)


def deep_mlp(depth=100, n_in=784, width=128, n_out=10):
    """An MLP of ``depth`` fully connected layers, ``n_in`` -> ``width`` ...
    -> ``n_out`` with ReLU between them: the long chain of cheap values
    that recomputation policies are measured on."""
    return MLP([n_in] + [width] * (depth - 1) + [n_out])


class ResNet50(chainer.Chain):
    """ResNet-50 (He et al. 2016) for 3xHxW images, H and W multiples of 32
    (64x64 in the memory benchmark): conv7x7/2-BN-ReLU with ``width``
    channels, 3x3/2 max pooling, four stages of 3, 4, 6 and 3 bottleneck
    blocks (Chainer's own BuildingBlock: conv1x1-BN-ReLU, conv3x3-BN-ReLU,
    conv1x1-BN plus the shortcut, then ReLU; stride 2 on the first 1x1
    convolution of the first block from the second stage on) of width, 2x,
    4x and 8x channels inside and 4x that outside, global average pooling
    and a fully connected layer.  ``blocks`` and ``width`` shrink it for
    tests."""

    def __init__(self, n_out=10, width=64, blocks=(3, 4, 6, 3)):
        super().__init__()
        with self.init_scope():
            self.conv0 = L.Convolution2D(3, width, 7, 2, 3, nobias=True)
            self.bn0 = L.BatchNormalization(width)
            stages, in_channels = [], width
            for stage, count in enumerate(blocks):
                inner = width * 2 ** stage
                stages.append(BuildingBlock(count, in_channels, inner, 4 * inner,
                                            1 if stage == 0 else 2))
                in_channels = 4 * inner
            self.stages = chainer.ChainList(*stages)
            self.fc = L.Linear(in_channels, n_out)

    def forward(self, x):
        h = F.relu(self.bn0(self.conv0(x)))
        h = F.max_pooling_2d(h, 3, 2, 1, cover_all=False)
        for stage in self.stages:
            h = stage(h)
        h = F.average_pooling_2d(h, h.shape[2:])
        return self.fc(h)


class VGG16(chainer.Chain):
    """VGG16 (Simonyan and Zisserman 2015, configuration D) for 3x64x64
    images: 13 conv3x3-ReLU layers in five groups of 2, 2, 3, 3 and 3 with
    ``width``, 2x, 4x, 8x and 8x channels, each group ending in 2x2 max
    pooling (64x64 becomes 2x2), then three fully connected layers
    (8 * width * 2 * 2 -> ``fc_width`` -> ``fc_width`` -> ``n_out``) with
    ReLU between them.  No dropout, so runs are deterministic."""

    GROUPS = (2, 2, 3, 3, 3)

    def __init__(self, n_out=10, width=64, fc_width=4096, image_size=64):
        super().__init__()
        convs, in_channels = [], 3
        for group, count in enumerate(self.GROUPS):
            channels = width * 2 ** min(group, 3)
            for _ in range(count):
                convs.append(L.Convolution2D(in_channels, channels, 3, 1, 1))
                in_channels = channels
        side = image_size // 2 ** len(self.GROUPS)
        with self.init_scope():
            self.convs = chainer.ChainList(*convs)
            self.fc1 = L.Linear(in_channels * side * side, fc_width)
            self.fc2 = L.Linear(fc_width, fc_width)
            self.fc3 = L.Linear(fc_width, n_out)

    def forward(self, x):
        h, layers = x, iter(self.convs)
        for count in self.GROUPS:
            for _ in range(count):
                h = F.relu(next(layers)(h))
            h = F.max_pooling_2d(h, 2, 2)
        h = F.relu(self.fc1(h))
        h = F.relu(self.fc2(h))
        return self.fc3(h)


class ConvBNReLU(chainer.Chain):
    """conv3x3 (no bias: BatchNormalization supplies it), BN, ReLU, keeping
    the channel count and the spatial size."""

    def __init__(self, channels):
        super().__init__()
        with self.init_scope():
            self.conv = L.Convolution2D(channels, channels, 3, 1, 1, nobias=True)
            self.bn = L.BatchNormalization(channels)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class DeepPlainCNN(chainer.Chain):
    """A plain (no shortcut) CNN: a conv3x3 from 3 to ``channels`` channels,
    ``depth`` ConvBNReLU blocks at full resolution, global average pooling
    and a fully connected layer.  Every block's activations are the same
    size, the case where checkpointing helps the most."""

    def __init__(self, depth=30, channels=32, n_out=10):
        super().__init__()
        with self.init_scope():
            self.conv0 = L.Convolution2D(3, channels, 3, 1, 1)
            self.blocks = chainer.ChainList(*[ConvBNReLU(channels) for _ in range(depth)])
            self.fc = L.Linear(channels, n_out)

    def forward(self, x):
        h = self.conv0(x)
        for block in self.blocks:
            h = block(h)
        h = F.average_pooling_2d(h, h.shape[2:])
        return self.fc(h)


class LSTMClassifier(chainer.Chain):
    """An NStepLSTM over a (batch, time, features) array, read as one
    sequence per batch row, then a fully connected layer on the last
    layer's final hidden state."""

    def __init__(self, n_in=8, hidden=16, n_layers=2, n_out=10):
        super().__init__()
        with self.init_scope():
            self.lstm = L.NStepLSTM(n_layers, n_in, hidden, 0.0)
            self.fc = L.Linear(hidden, n_out)

    def forward(self, x):
        hy, _, _ = self.lstm(None, None, list(F.separate(x, axis=0)))
        return self.fc(hy[-1])


class DropoutMLP(chainer.Chain):
    """Two hidden fully connected layers with ReLU, each followed by
    Dropout of ``ratio`` (random in training: recomputation must reuse its
    mask, never draw a new one), then the output layer."""

    def __init__(self, n_in=784, hidden=64, n_out=10, ratio=0.5):
        super().__init__()
        self.ratio = ratio
        with self.init_scope():
            self.l1 = L.Linear(n_in, hidden)
            self.l2 = L.Linear(hidden, hidden)
            self.l3 = L.Linear(hidden, n_out)

    def forward(self, x):
        h = F.dropout(F.relu(self.l1(x)), self.ratio)
        h = F.dropout(F.relu(self.l2(h)), self.ratio)
        return self.l3(h)
