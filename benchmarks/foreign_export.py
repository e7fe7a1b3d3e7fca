"""Export the foreign models of foreign_models.py to ONNX with PyTorch's two
exporters: the TorchScript one (``dynamo=False``) and the dynamo one
(``dynamo=True``, through onnxscript).

    .venv-torch/bin/python benchmarks/foreign_export.py OUT_DIR [--models NAME ...]
                                                        [--batches 1 32]

It runs in the benchmark venv (torch, torchvision, timm, transformers,
onnxscript: ``make bench-torch-env``) and imports nothing from this
repository.  Random weights (no downloads), ``eval()``, and no
``torch.no_grad()``: under it PyTorch's attention layers take a fused fast
path that the exporters cannot write.  For each model and batch size it
writes ``NAME.EXPORTER.bBATCH.onnx`` (both exporters at batch 1, the
TorchScript one at the larger batches, which only the timing needs) and
``NAME.bBATCH.npz``, the example inputs (``input_0``, ... in graph-input
order); a file already there is kept (delete it to export again).
``manifest.json`` in OUT_DIR records each file's outcome (or the export's
error, one line), its seconds and the versions used.
"""
import argparse
import json
import os
import sys
import time

import numpy
import torch

#: PyPI's torchvision 0.28.0 wheel is built against CUDA torch: its C++
#: extension does not load beside the CPU wheel, and importing it then fails
#: registering fake kernels for these two operators.  Declaring them first
#: lets it import; no model here calls them (they are detection's NMS).
_TORCHVISION_LIBRARY = torch.library.Library('torchvision', 'FRAGMENT')
for _op in ('nms', 'qnms'):
    try:
        torch._C._dispatch_find_schema_or_throw('torchvision::' + _op, '')
    except RuntimeError:
        _TORCHVISION_LIBRARY.define(
            'nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor' if _op == 'nms'
            else 'qnms(Tensor dets, Tensor scores, Tensor scores_zp, float scores_scale, '
                 'float iou_threshold) -> Tensor')

import timm  # noqa: E402
import torchvision  # noqa: E402
import transformers  # noqa: E402

EXPORTERS = ('torchscript', 'dynamo')


class FirstOutput(torch.nn.Module):
    """The model's first output as one tensor (a dict's ``key``, a tuple's
    first element), so that every file has one float output; the inputs
    are passed as the ``keywords`` when given (GPT-2's second positional
    argument is its cache, not the attention mask)."""

    def __init__(self, model, key=None, keywords=None):
        super().__init__()
        self.model, self.key, self.keywords = model, key, keywords

    def forward(self, *inputs):
        out = (self.model(**dict(zip(self.keywords, inputs))) if self.keywords
               else self.model(*inputs))
        if self.key is not None:
            return out[self.key]
        if isinstance(out, (tuple, list)):
            return out[0]
        return getattr(out, 'last_hidden_state', out)


class LSTMModel(torch.nn.Module):
    """A two-layer nn.LSTM over 32 time steps (batch second, as nn.LSTM
    defaults), and its output sequence."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(64, 128, num_layers=2)

    def forward(self, x):
        return self.lstm(x)[0]


def _image(size=224):
    return lambda batch: (torch.randn(batch, 3, size, size),)


def _tokens(vocab, length=64):
    """input_ids and an attention mask whose last quarter is padding."""
    def make(batch):
        ids = torch.randint(0, vocab, (batch, length))
        mask = torch.ones(batch, length, dtype=torch.int64)
        mask[:, length * 3 // 4:] = 0
        return ids, mask
    return make


def _torchvision(name, **kwargs):
    return lambda: torchvision.models.get_model(name, weights=None, **kwargs)


def _segmentation(name):
    return lambda: FirstOutput(torchvision.models.get_model(
        name, weights=None, weights_backbone=None, aux_loss=False), key='out')


def _timm(name):
    return lambda: timm.create_model(name, pretrained=False)


def _hf(model_class, config_class, keywords=('input_ids', 'attention_mask'), **config):
    def make():
        # The default attention implementation (sdpa): what users get.
        return FirstOutput(model_class(config_class(**config)), keywords=keywords)
    return make


def _whisper_encoder():
    config = transformers.WhisperConfig(d_model=384, encoder_layers=4, encoder_attention_heads=6,
                                        decoder_layers=1, decoder_attention_heads=6,
                                        encoder_ffn_dim=1536, decoder_ffn_dim=1536)
    return FirstOutput(transformers.WhisperModel(config).get_encoder(),
                       keywords=('input_features',))


_T = transformers
#: name -> (library, what it is, constructor, inputs(batch) -> tuple of tensors).
#: The transformers models use small configs (said in the second field).
MODELS = {
    'resnet18': ('torchvision', 'ResNet-18', _torchvision('resnet18'), _image()),
    'resnet50': ('torchvision', 'ResNet-50', _torchvision('resnet50'), _image()),
    'vgg11': ('torchvision', 'VGG-11', _torchvision('vgg11'), _image()),
    'mobilenet_v2': ('torchvision', 'MobileNetV2', _torchvision('mobilenet_v2'), _image()),
    'mobilenet_v3_small': ('torchvision', 'MobileNetV3-Small',
                           _torchvision('mobilenet_v3_small'), _image()),
    'mnasnet1_0': ('torchvision', 'MNASNet 1.0', _torchvision('mnasnet1_0'), _image()),
    'efficientnet_b0': ('torchvision', 'EfficientNet-B0', _torchvision('efficientnet_b0'),
                        _image()),
    'ghostnet_100': ('timm', 'GhostNet 1.0', _timm('ghostnet_100'), _image()),
    'mixnet_s': ('timm', 'MixNet-S', _timm('mixnet_s'), _image()),
    'efficientnet_lite0': ('timm', 'EfficientNet-Lite0', _timm('efficientnet_lite0'), _image()),
    'mobilevit_xxs': ('timm', 'MobileViT-XXS', _timm('mobilevit_xxs'), _image(256)),
    'deit_tiny': ('timm', 'DeiT-tiny', _timm('deit_tiny_patch16_224'), _image()),
    'deeplabv3': ('torchvision', 'DeepLabV3 (MobileNetV3-Large)',
                  _segmentation('deeplabv3_mobilenet_v3_large'), _image()),
    'fcn_resnet50': ('torchvision', 'FCN (ResNet-50)', _segmentation('fcn_resnet50'), _image()),
    'bert': ('transformers', 'BERT, 4 layers, hidden 256, 64 tokens',
             _hf(_T.BertModel, _T.BertConfig, hidden_size=256, num_hidden_layers=4,
                 num_attention_heads=4, intermediate_size=1024), _tokens(30522)),
    'distilbert': ('transformers', 'DistilBERT, 4 layers, dim 256, 64 tokens',
                   _hf(_T.DistilBertModel, _T.DistilBertConfig, dim=256, n_layers=4, n_heads=4,
                       hidden_dim=1024), _tokens(30522)),
    'gpt2': ('transformers', 'GPT-2, 4 layers, 256 wide, 64 tokens',
             _hf(_T.GPT2Model, _T.GPT2Config, n_embd=256, n_layer=4, n_head=4, use_cache=False),
             _tokens(50257)),
    'vit': ('transformers', 'ViT, 12 layers, hidden 192 (ViT-Ti), 224x224',
            _hf(_T.ViTModel, _T.ViTConfig, keywords=('pixel_values',), hidden_size=192,
                num_hidden_layers=12, num_attention_heads=3, intermediate_size=768), _image()),
    'whisper_encoder': ('transformers', 'Whisper encoder, 4 layers, d_model 384 (tiny), '
                        '80x3000 mel', _whisper_encoder, lambda b: (torch.randn(b, 80, 3000),)),
    'lstm': ('torch.nn', 'nn.LSTM, 2 layers, 64 in, 128 hidden, 32 steps', LSTMModel,
             lambda b: (torch.randn(32, b, 64),)),
    # More of the same families: channel shuffle, Concat-heavy blocks, larger mobiles.
    'shufflenet_v2': ('torchvision', 'ShuffleNetV2 x1.0', _torchvision('shufflenet_v2_x1_0'),
                      _image()),
    'squeezenet1_1': ('torchvision', 'SqueezeNet 1.1', _torchvision('squeezenet1_1'), _image()),
    'densenet121': ('torchvision', 'DenseNet-121', _torchvision('densenet121'), _image()),
    'mobilenet_v3_large': ('torchvision', 'MobileNetV3-Large',
                           _torchvision('mobilenet_v3_large'), _image()),
    'mnasnet0_5': ('torchvision', 'MNASNet 0.5', _torchvision('mnasnet0_5'), _image()),
    'regnet_y_400mf': ('torchvision', 'RegNetY-400MF', _torchvision('regnet_y_400mf'), _image()),
    'convnext_tiny': ('torchvision', 'ConvNeXt-T', _torchvision('convnext_tiny'), _image()),
    'lcnet_050': ('timm', 'LCNet 0.5', _timm('lcnet_050'), _image()),
    'lraspp': ('torchvision', 'LR-ASPP (MobileNetV3-Large)',
               _segmentation('lraspp_mobilenet_v3_large'), _image()),
    'albert': ('transformers', 'ALBERT, 4 layers, hidden 256, 64 tokens',
               _hf(_T.AlbertModel, _T.AlbertConfig, hidden_size=256, num_hidden_layers=4,
                   num_attention_heads=4, intermediate_size=1024, embedding_size=128),
               _tokens(30000)),
}


def file_name(name, exporter, batch):
    return '%s.%s.b%d.onnx' % (name, exporter, batch)


def _export(model, inputs, path, exporter):
    names = ['input_%d' % k for k in range(len(inputs))]
    if exporter == 'torchscript':
        torch.onnx.export(model, inputs, path, dynamo=False, opset_version=17,
                          input_names=names, output_names=['output'])
    else:
        program = torch.onnx.export(model, inputs, dynamo=True, external_data=False)
        program.save(path, external_data=False)


def export_one(out_dir, name, exporter, batch, manifest):
    """Export ``name`` with ``exporter`` at ``batch`` unless its file is
    there; records the outcome in ``manifest``."""
    library, what, constructor, make_inputs = MODELS[name]
    path = os.path.join(out_dir, file_name(name, exporter, batch))
    key = os.path.basename(path)
    if os.path.exists(path) and manifest.get(key, {}).get('status') == 'ok':
        return
    torch.manual_seed(0)
    model = constructor().eval()
    inputs = make_inputs(batch)
    numpy.savez(os.path.join(out_dir, '%s.b%d.npz' % (name, batch)),
                **{'input_%d' % k: t.numpy() for k, t in enumerate(inputs)})
    start = time.perf_counter()
    entry = {'model': name, 'library': library, 'what': what, 'exporter': exporter,
             'batch': batch}
    try:
        _export(model, inputs, path, exporter)
        entry['status'] = 'ok'
    except Exception as e:  # recorded: an exporter's failure is a finding, not a crash
        entry['status'] = ' '.join(('%s: %s' % (type(e).__name__, e)).split())[:500]
        if os.path.exists(path):
            os.remove(path)
    entry['export_s'] = round(time.perf_counter() - start, 1)
    manifest[key] = entry
    print('%-40s %s (%.1f s)' % (key, entry['status'][:100], entry['export_s']),
          file=sys.stderr, flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('out_dir')
    parser.add_argument('--models', nargs='+', choices=sorted(MODELS), default=list(MODELS))
    parser.add_argument('--batches', nargs='+', type=int, default=[1, 32])
    parser.add_argument('--exporters', nargs='+', choices=EXPORTERS, default=list(EXPORTERS))
    args = parser.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    manifest_path = os.path.join(args.out_dir, 'manifest.json')
    manifest = {}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    versions = {m.__name__: m.__version__ for m in (torch, torchvision, timm, transformers)}
    for batch in sorted(args.batches):
        for name in args.models:
            # Batch 1 is the acceptance count (both exporters); larger
            # batches only time the TorchScript file.
            for exporter in args.exporters if batch == 1 else ('torchscript',):
                export_one(args.out_dir, name, exporter, batch, manifest)
                manifest[file_name(name, exporter, batch)]['versions'] = versions
                with open(manifest_path + '.tmp', 'w') as f:
                    json.dump(manifest, f, indent=1, sort_keys=True)
                os.replace(manifest_path + '.tmp', manifest_path)


if __name__ == '__main__':
    main()
