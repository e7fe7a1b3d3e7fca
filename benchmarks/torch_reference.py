"""One training step of a benchmark model in PyTorch eager mode on the CPU,
starting from the weights Chainer initialized, timed on request so that the
benchmark can interleave it with the other candidates.

    python torch_reference.py INPUT.npz

INPUT.npz holds ``spec``, a JSON string such as
``{"model": "MLP", "sizes": [784, 100, 10], "optimizer": "sgd"}``
("LeNet5"; "ResNet18Style" with "width"; optimizers "sgd", "momentum",
"adam"; ``"accuracy": true`` to compute the batch accuracy too), the batch
``x`` (float32) and ``t`` (int32), and every parameter and BatchNormalization
running statistic under its Chainer path ('/0/W', '/blocks/0/bn1/gamma',
'/bn0/avg_mean', ...).  The script mirrors benchmarks/models.py layer for
layer and loads those arrays.  It runs the first step and prints one JSON
line, ``{"first_loss", "torch", "threads"}``; then for each line ``n`` it
reads from stdin it runs ``n`` steps and prints ``{"seconds": [...],
"cpu_seconds": [...]}`` (wall time, and the process's CPU time).

It runs in a virtualenv of its own with only torch and numpy, so it must
import nothing from Chainer or this repository.
"""
import json
import sys
import time

import numpy
import torch
import torch.nn as nn
import torch.nn.functional as F


def _batch_norm(channels):
    # PyTorch's momentum is the weight of the new batch: 0.1 == Chainer's decay 0.9.
    return nn.BatchNorm2d(channels, eps=2e-5, momentum=0.1)


class MLP(nn.Sequential):
    """Linear layers with ReLU between them; layer i is named 'i' as in Chainer."""

    def __init__(self, sizes):
        super().__init__(*[nn.Linear(n_in, n_out) for n_in, n_out in zip(sizes, sizes[1:])])

    def forward(self, x):
        for i, layer in enumerate(self):
            x = layer(x)
            if i + 1 < len(self):
                x = F.relu(x)
        return x


class LeNet5(nn.Module):
    """benchmarks/models.py's LeNet5, with the same child names."""

    def __init__(self, n_out=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc3 = nn.Linear(16 * 5 * 5, 120)
        self.fc4 = nn.Linear(120, 84)
        self.fc5 = nn.Linear(84, n_out)
        self.pool = nn.MaxPool2d(2, 2)

    def forward(self, x):
        h = self.pool(F.relu(self.conv1(x)))
        h = self.pool(F.relu(self.conv2(h)))
        h = F.relu(self.fc3(h.flatten(1)))  # (C, H, W) order, as Chainer's Linear
        h = F.relu(self.fc4(h))
        return self.fc5(h)


class BasicBlock(nn.Module):
    """benchmarks/models.py's BasicBlock, with the same child names."""

    def __init__(self, in_channels, out_channels, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = _batch_norm(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = _batch_norm(out_channels)
        self.projects = stride != 1 or in_channels != out_channels
        if self.projects:
            self.conv_s = nn.Conv2d(in_channels, out_channels, 1, stride, 0, bias=False)
            self.bn_s = _batch_norm(out_channels)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        shortcut = self.bn_s(self.conv_s(x)) if self.projects else x
        return F.relu(h + shortcut)


class ResNet18Style(nn.Module):
    """benchmarks/models.py's ResNet18Style, with the same child names."""

    def __init__(self, width=64, n_out=10):
        super().__init__()
        widths = [width, 2 * width, 4 * width, 8 * width]
        self.conv0 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn0 = _batch_norm(width)
        blocks = []
        in_channels = width
        for stage, channels in enumerate(widths):
            for i in range(2):
                blocks.append(BasicBlock(in_channels, channels, 2 if stage > 0 and i == 0 else 1))
                in_channels = channels
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AvgPool2d(4)
        self.fc = nn.Linear(widths[-1], n_out)

    def forward(self, x):
        h = F.relu(self.bn0(self.conv0(x)))
        h = self.pool(self.blocks(h))
        return self.fc(h.flatten(1))


def _build(spec):
    name = spec['model']
    if name == 'MLP':
        return MLP(spec['sizes'])
    if name == 'LeNet5':
        return LeNet5()
    if name == 'ResNet18Style':
        return ResNet18Style(spec.get('width', 64))
    raise ValueError('unknown model %r' % name)


def _chainer_paths(model):
    """Chainer's path for each parameter and BatchNorm running statistic.
    The modules are named as Chainer's links, so only the leaves differ."""
    leaves = {nn.Linear: {'weight': 'W', 'bias': 'b'},
              nn.Conv2d: {'weight': 'W', 'bias': 'b'},
              nn.BatchNorm2d: {'weight': 'gamma', 'bias': 'beta',
                               'running_mean': 'avg_mean', 'running_var': 'avg_var'}}
    paths = {}
    for prefix, module in model.named_modules():
        for torch_name, chainer_name in leaves.get(type(module), {}).items():
            tensor = getattr(module, torch_name)
            if tensor is not None:
                paths['/%s/%s' % (prefix.replace('.', '/'), chainer_name)] = tensor
    return paths


def _load(model, arrays):
    """Copy Chainer's arrays into the model; the two sets of names must agree."""
    paths = _chainer_paths(model)
    given = set(arrays) - {'spec', 'x', 't'}
    if given != set(paths):
        raise ValueError('arrays in the input do not match the model: missing %s, unexpected %s'
                         % (sorted(set(paths) - given), sorted(given - set(paths))))
    with torch.no_grad():
        for path, tensor in paths.items():
            tensor.copy_(torch.from_numpy(arrays[path]))


def _optimizer(name, params):
    if name == 'sgd':
        return torch.optim.SGD(params, lr=0.01)
    if name == 'momentum':
        # PyTorch keeps v = 0.9 v + g and steps p -= lr v where Chainer keeps
        # v = 0.9 v - lr g and steps p += v: the same path at a fixed lr up
        # to rounding, but not the same operations.  Fine for timing.
        return torch.optim.SGD(params, lr=0.01, momentum=0.9)
    if name == 'adam':
        # PyTorch adds eps after the bias correction, Chainer before it.
        return torch.optim.Adam(params, lr=0.001, betas=(0.9, 0.999), eps=1e-8)
    raise ValueError('unknown optimizer %r' % name)


def train_step(model, optimizer, x, t, accuracy):
    """One training iteration; returns the loss.  ``accuracy``: the batch
    accuracy is computed too, as L.Classifier does."""
    optimizer.zero_grad()
    y = model(x)
    if accuracy:
        (y.detach().argmax(dim=1) == t).float().mean()
    loss = F.cross_entropy(y, t)
    loss.backward()
    optimizer.step()
    return loss


def serve(step, requests, replies):
    """Run the first step and reply with its loss and the versions, then
    for each request line ``n`` run ``n`` steps and reply with their times
    in seconds, wall and this process's CPU time.  One JSON line per reply;
    stops at the end of the requests."""
    first_loss = step().item()
    _reply(replies, {'first_loss': first_loss, 'torch': torch.__version__,
                     'threads': torch.get_num_threads()})
    for line in requests:
        seconds, cpu_seconds = [], []
        for _ in range(int(line)):
            start, start_cpu = time.perf_counter(), time.process_time()
            step()
            cpu_seconds.append(time.process_time() - start_cpu)
            seconds.append(time.perf_counter() - start)
        _reply(replies, {'seconds': seconds, 'cpu_seconds': cpu_seconds})


def _reply(replies, message):
    replies.write(json.dumps(message) + '\n')
    replies.flush()


def main(argv):
    """Serve the benchmark described by the .npz file named in argv."""
    if len(argv) != 2:
        sys.exit('usage: %s INPUT.npz' % argv[0])
    with numpy.load(argv[1]) as data:
        arrays = {key: data[key] for key in data.files}
    spec = json.loads(str(arrays['spec']))
    model = _build(spec)
    _load(model, arrays)
    model.train()
    optimizer = _optimizer(spec['optimizer'], model.parameters())
    x = torch.from_numpy(arrays['x'])
    t = torch.from_numpy(arrays['t']).long()  # cross_entropy wants int64 labels
    serve(lambda: train_step(model, optimizer, x, t, spec.get('accuracy', False)),
          sys.stdin, sys.stdout)


if __name__ == '__main__':
    main(sys.argv)
