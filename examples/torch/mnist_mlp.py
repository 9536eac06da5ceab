"""The 784-128-10 MLP of examples/mnist-mlp.yaml written as a PyTorch script:
the same job with mnist_mlp.yaml measures what the Python path costs against
kelpie's built-in Go MLP (docs/torch.md).

The images are in memory, so the data sets are TensorDatasets (flattened
images, labels): a batch is one indexing of each tensor, not a Python call
per sample (kelpie's child, like torch's DataLoader with a batch sampler,
indexes a TensorDataset with the whole batch when collate is the default).
"""
import os
import sys

import torch.nn as nn
from torch.utils.data import TensorDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mnist_cnn  # noqa: E402  (its MNIST loader)


def flat(images, labels):
    m = mnist_cnn.MNIST(images, labels)
    return TensorDataset(m.x.reshape(-1, 784), m.y)


def model():
    return nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))


def train_set():
    return flat("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")


def test_set():
    return flat("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
