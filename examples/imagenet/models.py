"""Networks of the ImageNet example; each maps a batch of CHW images of
any square size to class scores (global average pooling before the
classifier), so small crops make quick runs."""
import chainer
import chainer.functions as F
import chainer.links as L
from chainer.links.model.vision.resnet import BuildingBlock


class ResNet50(chainer.Chain):
    """ResNet-50 (He et al., 2015) with ``n_class`` outputs, built from
    Chainer's own residual blocks, randomly initialized."""

    def __init__(self, n_class=1000):
        super().__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(3, 64, 7, 2, 3, initialW=chainer.initializers.HeNormal())
            self.bn1 = L.BatchNormalization(64)
            self.res2 = BuildingBlock(3, 64, 64, 256, 1)
            self.res3 = BuildingBlock(4, 256, 128, 512, 2)
            self.res4 = BuildingBlock(6, 512, 256, 1024, 2)
            self.res5 = BuildingBlock(3, 1024, 512, 2048, 2)
            self.fc = L.Linear(2048, n_class)

    def forward(self, x):
        h = F.max_pooling_2d(F.relu(self.bn1(self.conv1(x))), 3, stride=2)
        h = self.res5(self.res4(self.res3(self.res2(h))))
        return self.fc(F.average_pooling_2d(h, h.shape[2:]))


class SmallNet(chainer.Chain):
    """Two strided convolutions with batch normalization and a linear
    classifier: a model that trains in seconds on a CPU."""

    def __init__(self, n_class=1000):
        super().__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(3, 16, 3, 2, 1, nobias=True)
            self.bn1 = L.BatchNormalization(16)
            self.conv2 = L.Convolution2D(16, 32, 3, 2, 1, nobias=True)
            self.bn2 = L.BatchNormalization(32)
            self.fc = L.Linear(32, n_class)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        return self.fc(F.average_pooling_2d(h, h.shape[2:]))


#: --model choices.
MODELS = {'resnet50': ResNet50, 'small': SmallNet}
