"""A small CNN on real MNIST: kelpie's example of a user's own PyTorch model.

kelpie trains it with examples/torch/mnist_cnn.yaml (`kelpie run`): the
servers keep the parameters and run the optimizer, the workers' Python
children run forward and backward. Run on its own (`python3 mnist_cnn.py`)
it trains the same model in one process with the same global batch,
optimizer and epochs, for comparison. The script has no kelpie calls.

The data are the idx files `make data` puts in data/mnist; kelpie hands its
children the directory it found in KELPIE_MNIST_DIR.
"""
import gzip
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def mnist_dir():
    d = os.environ.get("KELPIE_MNIST_DIR") or os.path.join(HERE, "..", "..", "data", "mnist")
    if not os.path.exists(os.path.join(d, "train-images-idx3-ubyte.gz")):
        raise FileNotFoundError("no MNIST in %s: run `make data` or set KELPIE_MNIST_DIR" % d)
    return d


class MNIST(torch.utils.data.Dataset):
    def __init__(self, images, labels):
        d = mnist_dir()
        with gzip.open(os.path.join(d, images)) as f:
            x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
        with gzip.open(os.path.join(d, labels)) as f:
            y = np.frombuffer(f.read(), np.uint8, offset=8)
        # Normalised in place: one float copy of the images, not three.
        self.x = torch.from_numpy(x.astype(np.float32)).div_(255).sub_(0.1307).div_(0.3081)
        self.y = torch.from_numpy(y.astype(np.int64))

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)   # 28 -> 24, pooled to 12
        self.conv2 = nn.Conv2d(16, 32, 5)  # 12 -> 8, pooled to 4
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def model():
    return CNN()


def train_set():
    return MNIST("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")


def test_set():
    return MNIST("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


# loss, metric and collate are torch's defaults: cross-entropy, accuracy,
# default_collate.


def local(epochs=3, global_batch=128, lr=0.05, momentum=0.9, seed=1):
    """The same training in one process: SGD with momentum on the mean
    gradient of each global batch, as kelpie's servers apply it."""
    torch.manual_seed(seed)
    torch.set_num_threads(int(os.environ.get("THREADS", "2")))
    m, train, test = model(), train_set(), test_set()
    opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=momentum)
    g = torch.Generator().manual_seed(seed)
    for epoch in range(epochs):
        perm = torch.randperm(len(train), generator=g)
        m.train()
        for s in range(0, len(train) - global_batch + 1, global_batch):
            idx = perm[s:s + global_batch]
            opt.zero_grad()
            F.cross_entropy(m(train.x[idx]), train.y[idx]).backward()
            opt.step()
        m.eval()
        with torch.no_grad():
            acc = (m(test.x).argmax(1) == test.y).float().mean().item()
        print("epoch %d: test accuracy %.4f" % (epoch + 1, acc), flush=True)
    return acc


if __name__ == "__main__":
    local(epochs=int(sys.argv[1]) if len(sys.argv) > 1 else 3)
