"""The 784-128-10 MLP of examples/mnist-mlp.yaml written as a PyTorch script:
the same job with mnist_mlp.yaml measures what the Python path costs against
kelpie's built-in Go MLP (docs/torch.md)."""
import os
import sys

import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mnist_cnn  # noqa: E402  (its MNIST loader)


class Flat(mnist_cnn.MNIST):
    def __getitem__(self, i):
        return self.x[i].reshape(784), self.y[i]


def model():
    return nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))


def train_set():
    return Flat("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")


def test_set():
    return Flat("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
