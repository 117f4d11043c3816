"""Python twins of zrt-train's example models: the same parameter names, shapes and maths as the
C++ modules of examples/zrt_train.cpp, so that one state dict means the same model on both
sides; and the example's data, generated the same way (torch's CPU generator, the library the
main build links)."""
import torch


class MlpBlock(torch.nn.Module):
    """examples/zrt_train.cpp MlpBlockImpl: x + tanh(fc(x))."""

    def __init__(self, width):
        super().__init__()
        self.fc = torch.nn.Linear(width, width)

    def forward(self, x):
        return x + torch.tanh(self.fc(x))


class Mlp(torch.nn.Module):
    """examples/zrt_train.cpp MlpImpl: input (16 -> width), blocks h0..h{L-1}, output (width -> 2)."""

    def __init__(self, width, layers):
        super().__init__()
        self.input = torch.nn.Linear(16, width)
        for i in range(layers):
            self.add_module(f"h{i}", MlpBlock(width))
        self.layers = layers
        self.output = torch.nn.Linear(width, 2)

    def forward(self, x):
        x = self.input(x)
        for i in range(self.layers):
            x = getattr(self, f"h{i}")(x)
        return self.output(x).float()


def regression_data(n, seed):
    """examples/zrt_train.cpp RegressionDataset(n, seed): y = [sin(2 x.a), 0.5 cos(3 x.b)]."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 16, generator=gen) * 2 - 1
    a = torch.linspace(-1, 1, 16).view(16, 1)
    b = torch.linspace(1, -1, 16).view(16, 1)
    y = torch.cat([torch.sin(x.matmul(a) * 2), 0.5 * torch.cos(x.matmul(b) * 3)], 1)
    return x, y
