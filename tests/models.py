"""Models several tests share."""
import chainer
import chainer.functions as F
import chainer.links as L


class MLP(chainer.Chain):
    """Chainer's MNIST MLP (input size inferred)."""

    def __init__(self, n_units=1000, n_out=10):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(None, n_units)
            self.l2 = L.Linear(None, n_units)
            self.l3 = L.Linear(None, n_out)

    def forward(self, x):
        return self.l3(F.relu(self.l2(F.relu(self.l1(x)))))


class LeNet5(chainer.Chain):
    """LeNet-5 on 1x28x28 images, optionally with BatchNormalization after
    each convolution (Dropout off)."""

    def __init__(self, n_out=10, batch_norm=False):
        super().__init__()
        self.batch_norm = batch_norm
        with self.init_scope():
            self.conv1 = L.Convolution2D(1, 6, 5, pad=2)
            self.conv2 = L.Convolution2D(6, 16, 5)
            if batch_norm:
                self.bn1 = L.BatchNormalization(6)
                self.bn2 = L.BatchNormalization(16)
            self.fc3 = L.Linear(16 * 5 * 5, 120)
            self.fc4 = L.Linear(120, 84)
            self.fc5 = L.Linear(84, n_out)

    def forward(self, x):
        h = self.conv1(x)
        h = F.max_pooling_2d(F.relu(self.bn1(h) if self.batch_norm else h), 2, 2)
        h = self.conv2(h)
        h = F.max_pooling_2d(F.relu(self.bn2(h) if self.batch_norm else h), 2, 2)
        h = F.relu(self.fc3(h))
        h = F.relu(self.fc4(h))
        return self.fc5(h)
