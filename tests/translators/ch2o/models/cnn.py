"""Image classifiers with their losses: an MLP, AlexNet, a bottleneck ResNet
and GoogLeNet with its two auxiliary classifiers.

Each ``forward(x, t)`` returns the softmax cross entropy of its logits
against the labels ``t``.  Widths and depths are cut down for 3x32x32
images; every layer kind, branch and loss of the full model is kept.
"""
import chainer
import chainer.functions as F
import chainer.links as L
from chainer import initializers


class MLP(chainer.Chain):
    """Three fully connected layers, ReLU between them."""

    def __init__(self, n_in=12, n_units=16, n_out=5):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(n_in, n_units)
            self.l2 = L.Linear(n_units, n_units)
            self.l3 = L.Linear(n_units, n_out)

    def forward(self, x, t):
        h = F.relu(self.l1(x))
        h = F.relu(self.l2(h))
        return F.softmax_cross_entropy(self.l3(h), t)


class AlexNet(chainer.Chain):
    """Five convolutions (local response normalization and max pooling
    after the first two, max pooling after the last) and three fully
    connected layers with dropout, on 3x32x32 images."""

    def __init__(self, n_class=10, width=4, dropout=0.5):
        super().__init__()
        self.dropout = dropout
        with self.init_scope():
            self.conv1 = L.Convolution2D(3, 2 * width, 5, stride=2)        # 32 -> 14 -> 7
            self.conv2 = L.Convolution2D(2 * width, 4 * width, 5, pad=2)   # 7 -> 3
            self.conv3 = L.Convolution2D(4 * width, 6 * width, 3, pad=1)
            self.conv4 = L.Convolution2D(6 * width, 6 * width, 3, pad=1)
            self.conv5 = L.Convolution2D(6 * width, 4 * width, 3, pad=1)   # 3 -> 1
            self.fc6 = L.Linear(4 * width, 8 * width)
            self.fc7 = L.Linear(8 * width, 8 * width)
            self.fc8 = L.Linear(8 * width, n_class)

    def forward(self, x, t):
        h = F.max_pooling_2d(F.local_response_normalization(F.relu(self.conv1(x))), 3, stride=2)
        h = F.max_pooling_2d(F.local_response_normalization(F.relu(self.conv2(h))), 3, stride=2)
        h = F.relu(self.conv3(h))
        h = F.relu(self.conv4(h))
        h = F.max_pooling_2d(F.relu(self.conv5(h)), 3, stride=2)
        h = F.dropout(F.relu(self.fc6(h)), self.dropout)
        h = F.dropout(F.relu(self.fc7(h)), self.dropout)
        return F.softmax_cross_entropy(self.fc8(h), t)


def _conv(in_channels, out_channels, ksize, stride=1, pad=0):
    """A bias-free He-initialised convolution, as ResNet's."""
    return L.Convolution2D(in_channels, out_channels, ksize, stride, pad,
                           initialW=initializers.HeNormal(), nobias=True)


class ProjectionBottleneck(chainer.Chain):
    """The first unit of a stage: 1x1 (strided), 3x3, 1x1 convolutions,
    each batch-normalized, added to a strided 1x1 projection of the input."""

    def __init__(self, in_size, ch, out_size, stride=2):
        super().__init__()
        with self.init_scope():
            self.conv1 = _conv(in_size, ch, 1, stride)
            self.bn1 = L.BatchNormalization(ch)
            self.conv2 = _conv(ch, ch, 3, 1, 1)
            self.bn2 = L.BatchNormalization(ch)
            self.conv3 = _conv(ch, out_size, 1)
            self.bn3 = L.BatchNormalization(out_size)
            self.shortcut = _conv(in_size, out_size, 1, stride)
            self.bn4 = L.BatchNormalization(out_size)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        return F.relu(h + self.bn4(self.shortcut(x)))


class IdentityBottleneck(chainer.Chain):
    """The other units of a stage: the same three convolutions added to the
    input itself."""

    def __init__(self, size, ch):
        super().__init__()
        with self.init_scope():
            self.conv1 = _conv(size, ch, 1)
            self.bn1 = L.BatchNormalization(ch)
            self.conv2 = _conv(ch, ch, 3, 1, 1)
            self.bn2 = L.BatchNormalization(ch)
            self.conv3 = _conv(ch, size, 1)
            self.bn3 = L.BatchNormalization(size)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        return F.relu(self.bn3(self.conv3(h)) + x)


class Stage(chainer.ChainList):
    """``n_units`` bottlenecks applied in turn, by iterating over the
    ChainList's children."""

    def __init__(self, n_units, in_size, ch, out_size, stride=2):
        super().__init__()
        self.add_link(ProjectionBottleneck(in_size, ch, out_size, stride))
        for _ in range(n_units - 1):
            self.add_link(IdentityBottleneck(out_size, ch))

    def forward(self, x):
        for unit in self.children():
            x = unit(x)
        return x


class ResNet(chainer.Chain):
    """ResNet-50's layout (7x7 stem, max pooling, bottleneck stages, global
    average pooling, classifier) with three stages of two units."""

    def __init__(self, n_class=10):
        super().__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(3, 8, 7, 2, 3, initialW=initializers.HeNormal())
            self.bn1 = L.BatchNormalization(8)
            self.res2 = Stage(2, 8, 4, 16, stride=1)    # 8x8
            self.res3 = Stage(2, 16, 8, 32)             # 4x4
            self.res4 = Stage(2, 32, 16, 64)            # 2x2
            self.fc = L.Linear(64, n_class)

    def forward(self, x, t):
        h = self.bn1(self.conv1(x))
        h = F.max_pooling_2d(F.relu(h), 3, stride=2)
        h = self.res2(h)
        h = self.res3(h)
        h = self.res4(h)
        h = F.average_pooling_2d(h, 2, stride=1)
        return F.softmax_cross_entropy(self.fc(h), t)


class Inception(chainer.Chain):
    """Four branches concatenated on channels: a 1x1 convolution, 3x3 and
    5x5 convolutions each after a 1x1 projection, and a projected 3x3 max
    pooling; every branch keeps the spatial size."""

    def __init__(self, in_channels, out1, proj3, out3, proj5, out5, proj_pool):
        super().__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(in_channels, out1, 1)
            self.proj3 = L.Convolution2D(in_channels, proj3, 1)
            self.conv3 = L.Convolution2D(proj3, out3, 3, pad=1)
            self.proj5 = L.Convolution2D(in_channels, proj5, 1)
            self.conv5 = L.Convolution2D(proj5, out5, 5, pad=2)
            self.projp = L.Convolution2D(in_channels, proj_pool, 1)

    def forward(self, x):
        branches = [
            self.conv1(x),
            self.conv3(F.relu(self.proj3(x))),
            self.conv5(F.relu(self.proj5(x))),
            self.projp(F.max_pooling_2d(x, 3, stride=1, pad=1)),
        ]
        return F.relu(F.concat(branches, axis=1))


class AuxiliaryClassifier(chainer.Chain):
    """GoogLeNet's side head: average pooling, a 1x1 convolution and two
    fully connected layers."""

    def __init__(self, in_channels, n_class):
        super().__init__()
        with self.init_scope():
            self.conv = L.Convolution2D(in_channels, 8, 1)
            self.fc1 = L.Linear(8, 16)
            self.fc2 = L.Linear(16, n_class)

    def forward(self, h):
        h = F.average_pooling_2d(h, 2, stride=1)
        h = F.relu(self.conv(h))
        h = F.relu(self.fc1(h))
        return self.fc2(h)


class GoogLeNet(chainer.Chain):
    """GoogLeNet's stem (convolutions, max pooling, local response
    normalization), inception modules with max pooling between groups, two
    auxiliary classifiers whose losses are added at weight 0.3, and a final
    classifier after average pooling and dropout."""

    def __init__(self, n_class=10, dropout=0.4):
        super().__init__()
        self.dropout = dropout
        with self.init_scope():
            self.conv1 = L.Convolution2D(3, 8, 7, stride=2, pad=3)         # 32 -> 16 -> 8
            self.conv2_reduce = L.Convolution2D(8, 8, 1)
            self.conv2 = L.Convolution2D(8, 16, 3, stride=1, pad=1)        # 8 -> 4
            self.inc3a = Inception(16, 4, 4, 8, 2, 4, 4)                   # 20 channels
            self.inc3b = Inception(20, 8, 8, 12, 2, 6, 4)                  # 30, 4 -> 2
            self.inc4a = Inception(30, 12, 6, 12, 2, 4, 4)                 # 32
            self.inc4b = Inception(32, 10, 6, 12, 2, 6, 4)                 # 32
            self.inc4c = Inception(32, 12, 8, 14, 2, 6, 8)                 # 40
            self.inc5a = Inception(40, 12, 8, 16, 2, 8, 8)                 # 44
            self.aux1 = AuxiliaryClassifier(32, n_class)
            self.aux2 = AuxiliaryClassifier(32, n_class)
            self.fc = L.Linear(44, n_class)

    def forward(self, x, t):
        h = F.relu(self.conv1(x))
        h = F.local_response_normalization(F.max_pooling_2d(h, 3, stride=2), n=5)
        h = F.relu(self.conv2_reduce(h))
        h = F.relu(self.conv2(h))
        h = F.max_pooling_2d(F.local_response_normalization(h, n=5), 3, stride=2)

        h = self.inc3a(h)
        h = self.inc3b(h)
        h = F.max_pooling_2d(h, 3, stride=2)
        h = self.inc4a(h)
        loss1 = F.softmax_cross_entropy(self.aux1(h), t)

        h = self.inc4b(h)
        loss2 = F.softmax_cross_entropy(self.aux2(h), t)

        h = self.inc4c(h)
        h = self.inc5a(h)
        h = F.average_pooling_2d(h, 2, stride=1)
        loss3 = F.softmax_cross_entropy(self.fc(F.dropout(h, self.dropout)), t)
        return 0.3 * (loss1 + loss2) + loss3
