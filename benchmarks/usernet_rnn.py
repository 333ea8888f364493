"""A recurrent sequence model: a 1-D convolution over 40 filterbank features, a two-layer LSTM,
a bidirectional GRU and a classifier per step (100 frames). A user's network, not in the zoo
(random weights), exported to ONNX:

    python benchmarks/usernet_rnn.py rnn.onnx
    python benchmarks/bench_models.py --models rnn.onnx --onnx
"""
import sys, torch, torch.nn as nn
class Net(nn.Module):
    def __init__(s):
        super().__init__(); s.conv = nn.Conv1d(40, 128, 3, padding=1); s.lstm = nn.LSTM(128, 192, num_layers=2, batch_first=True); s.gru = nn.GRU(192, 96, batch_first=True, bidirectional=True); s.fc = nn.Linear(192, 30)
    def forward(s, x):
        x = torch.relu(s.conv(x)).transpose(1, 2); x, _ = s.lstm(x); x, _ = s.gru(x); return s.fc(x)
torch.manual_seed(0); m = Net().eval()
torch.onnx.export(m, (torch.randn(1, 40, 100),), sys.argv[1] if len(sys.argv) > 1 else "rnn.onnx", opset_version=14, dynamo=False); print("ok")
