# A tiny torch script for kelpie's tests: a linear classifier on seeded
# Gaussian blobs, and with TINY_SPARSE=1 in the environment an EmbeddingBag
# model; with TINY_TENSORS=1 the training set is a TensorDataset of the
# same samples.
import os

import torch
import torch.nn as nn

CLASSES = 3
SPARSE = os.environ.get("TINY_SPARSE") == "1"


class Blobs(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.y = torch.randint(0, CLASSES, (n,), generator=g)
        centers = torch.tensor([[2.0, 0.0], [-2.0, 1.0], [0.0, -2.0]])
        self.x = centers[self.y] + 0.5 * torch.randn(n, 2, generator=g)
        self.ids = (self.y * 1000 + torch.randint(0, 3, (n,), generator=g)) * 7919 % (1 << 24)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        if SPARSE:
            return self.ids[i], self.y[i]
        return self.x[i], self.y[i]


class Bag(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(1 << 24, 4, mode="sum", sparse=True)
        self.out = nn.Linear(4, CLASSES)

    def forward(self, ids, offsets):
        return self.out(self.emb(ids, offsets))


def model():
    if SPARSE:
        return Bag()
    return nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, CLASSES))


if SPARSE:
    def collate(samples):  # the dense model's batches use default_collate
        xs = torch.stack([s[0] for s in samples])
        ys = torch.stack([s[1] for s in samples])
        return (xs, torch.arange(len(samples))), ys


def train_set():
    if os.environ.get("TINY_BROKEN") == "train_set":
        return [1, 2, 3][7]
    b = Blobs(600, 1)
    if os.environ.get("TINY_TENSORS") == "1":  # the same samples as tensors
        return torch.utils.data.TensorDataset(b.x, b.y)
    return b


def test_set():
    return Blobs(200, 2)


if os.environ.get("TINY_NAN") == "1":
    def loss(output, target):
        return nn.functional.cross_entropy(output, target) * float("nan")
