"""An AlexNet-style classifier at 227x227, as exported years ago (opset 9): an 11x11 stride-4
stem (55x55), local response normalization, a 5x5 layer at 27x27, three 3x3 layers at 13x13
(13 and 27 allow few register tiles of positions), max pools, and three large dense layers
(9216 -> 4096 -> 4096 -> 1000, weights streamed once). A user's network, not in the zoo
(random weights), exported to ONNX:

    python benchmarks/usernet_alexnet.py alexnet.onnx
    python benchmarks/bench_models.py --models alexnet.onnx --onnx
"""
import sys, torch, torch.nn as nn
class Net(nn.Module):
    def __init__(s):
        super().__init__()
        s.features = nn.Sequential(
            nn.Conv2d(3, 96, 11, 4), nn.ReLU(), nn.LocalResponseNorm(5, 1e-4, 0.75, 2.0),
            nn.MaxPool2d(3, 2),
            nn.Conv2d(96, 256, 5, padding=2), nn.ReLU(), nn.LocalResponseNorm(5, 1e-4, 0.75, 2.0),
            nn.MaxPool2d(3, 2),
            nn.Conv2d(256, 384, 3, padding=1), nn.ReLU(),
            nn.Conv2d(384, 384, 3, padding=1), nn.ReLU(),
            nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2))
        s.classifier = nn.Sequential(nn.Linear(9216, 4096), nn.ReLU(), nn.Linear(4096, 4096),
                                     nn.ReLU(), nn.Linear(4096, 1000))
    def forward(s, x):
        return s.classifier(torch.flatten(s.features(x), 1))
torch.manual_seed(0); m = Net().eval()
torch.onnx.export(m, (torch.randn(1, 3, 227, 227),), sys.argv[1] if len(sys.argv) > 1 else "alexnet.onnx", opset_version=9, dynamo=False); print("ok")
