"""A 3-D U-Net for volumes (medical imaging): one input channel, 24x56x56 voxels, two levels of
3x3x3 convolutions with instance norm and LeakyReLU, strided 3-D downsampling, kernel = stride
transposed 3-D convolutions to upsample, skip concatenations; channels 12/24/48 (irregular),
opset 13. A user's network, not in the zoo (random weights), exported to ONNX:

    python benchmarks/usernet_unet3d.py unet3d.onnx
    python benchmarks/bench_models.py --models unet3d.onnx --onnx
"""
import sys, torch, torch.nn as nn
def block(a, b, st=1):
    return nn.Sequential(nn.Conv3d(a, b, 3, st, 1), nn.InstanceNorm3d(b, affine=True), nn.LeakyReLU(0.01),
                         nn.Conv3d(b, b, 3, 1, 1), nn.InstanceNorm3d(b, affine=True), nn.LeakyReLU(0.01))
class Net(nn.Module):
    def __init__(s):
        super().__init__(); s.e1, s.e2, s.e3 = block(1, 12), block(12, 24, 2), block(24, 48, 2)
        s.u2, s.d2 = nn.ConvTranspose3d(48, 24, 2, 2), block(48, 24); s.u1, s.d1 = nn.ConvTranspose3d(24, 12, 2, 2), block(24, 12)
        s.out = nn.Conv3d(12, 3, 1)
    def forward(s, x):
        a = s.e1(x); b = s.e2(a); c = s.e3(b)
        b = s.d2(torch.cat([s.u2(c), b], 1)); return s.out(s.d1(torch.cat([s.u1(b), a], 1)))
torch.manual_seed(0); m = Net().eval()
torch.onnx.export(m, (torch.randn(1, 1, 24, 56, 56),), sys.argv[1] if len(sys.argv) > 1 else "unet3d.onnx", opset_version=13, dynamo=False); print("ok")
