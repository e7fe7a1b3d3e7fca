"""The benchmark models, in Chainer.  Every other implementation
(hand-written NumPy, PyTorch) mirrors these layer for layer and takes its
initial weights from them."""
import chainer
import chainer.functions as F
import chainer.links as L


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
