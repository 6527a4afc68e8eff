"""jtmini.models.inception (Inception v3) against PyTorch CPU: blocks with the same weights give the
same values and input gradients (torch layers written out here, as torchvision is not a
dependency); the whole model has torchvision's parameter names and count, trains a step, and
its auxiliary head matches its shape. Inputs are small: every new shape compiles kernels."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import jtmini as jt
from jtmini.models import inception, inception_v3


def _torch_conv(block, x, train):
    """torchvision's BasicConv2d with ``block``'s weights and running statistics."""
    conv, bn = block.conv, block.bn
    y = F.conv2d(x, torch.from_numpy(conv.weight.numpy()), stride=conv.stride, padding=conv.padding)
    return F.relu(F.batch_norm(y, torch.from_numpy(bn.running_mean.numpy()), torch.from_numpy(bn.running_var.numpy()),
                               torch.from_numpy(bn.weight.numpy()), torch.from_numpy(bn.bias.numpy()),
                               training=train, eps=1e-3))


def _torch_block_a(m, x, train):
    c = lambda name, v: _torch_conv(getattr(m, name), v, train)      # noqa: E731
    b5 = c("branch5x5_2", c("branch5x5_1", x))
    b3 = c("branch3x3dbl_3", c("branch3x3dbl_2", c("branch3x3dbl_1", x)))
    pool = c("branch_pool", F.avg_pool2d(x, 3, stride=1, padding=1))
    return torch.cat([c("branch1x1", x), b5, b3, pool], 1)


def _torch_block_e(m, x, train):
    c = lambda name, v: _torch_conv(getattr(m, name), v, train)      # noqa: E731
    b3 = c("branch3x3_1", x)
    b3 = torch.cat([c("branch3x3_2a", b3), c("branch3x3_2b", b3)], 1)
    d3 = c("branch3x3dbl_2", c("branch3x3dbl_1", x))
    d3 = torch.cat([c("branch3x3dbl_3a", d3), c("branch3x3dbl_3b", d3)], 1)
    return torch.cat([c("branch1x1", x), b3, d3, c("branch_pool", F.avg_pool2d(x, 3, stride=1, padding=1))], 1)


def _randomise_bn(module, rng):
    """Running statistics and affine parameters off their defaults, so eval mode tests them."""
    for m in module.modules():
        if isinstance(m, jt.nn.BatchNorm2d):
            c = m.weight.shape[0]
            m.running_mean.assign(rng.standard_normal(c).astype(np.float32) * 0.1)
            m.running_var.assign(rng.uniform(0.5, 2, c).astype(np.float32))
            m.weight.assign(rng.uniform(0.5, 1.5, c).astype(np.float32))
            m.bias.assign(rng.standard_normal(c).astype(np.float32) * 0.1)


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("build, reference, channels", [
    (lambda: inception.InceptionA(8, pool_features=4), _torch_block_a, 8),
    (lambda: inception.InceptionE(8), _torch_block_e, 8),
])
def test_blocks_match_torch(rng, train, build, reference, channels):
    block = build()
    _randomise_bn(block, rng)
    block.train() if train else block.eval()
    data = rng.standard_normal((2, channels, 6, 5)).astype(np.float32)
    x = jt.array(data)
    out = block(x)
    tx = torch.tensor(data, requires_grad=True)
    expected = reference(block, tx, train)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-4, atol=1e-4)
    weights = rng.standard_normal(expected.shape).astype(np.float32)
    (grad,) = jt.grad((out * jt.array(weights)).sum(), [x])
    (expected * torch.from_numpy(weights)).sum().backward()
    np.testing.assert_allclose(grad.numpy(), tx.grad.numpy(), rtol=1e-3, atol=1e-3)


def test_basic_conv_takes_rectangular_kernels(rng):
    block = inception.BasicConv2d(3, 4, kernel_size=(1, 7), padding=(0, 3))
    block.eval()
    data = rng.standard_normal((1, 3, 5, 9)).astype(np.float32)
    np.testing.assert_allclose(block(jt.array(data)).numpy(), _torch_conv(block, torch.from_numpy(data), False).numpy(),
                               rtol=1e-4, atol=1e-5)


def test_model_has_torchvision_names_and_size():
    model = inception_v3()
    params = {name: p.shape for name, p in model.state_dict().items() if "running" not in name}
    # torchvision's inception_v3(aux_logits=True) has 27,161,264 parameters
    assert sum(int(np.prod(s)) for s in params.values()) == 27161264
    assert params["Mixed_5b.branch1x1.conv.weight"] == (64, 192, 1, 1)
    assert params["Mixed_6b.branch7x7_2.conv.weight"] == (128, 128, 1, 7)
    assert params["AuxLogits.fc.weight"] == (1000, 768) and params["fc.weight"] == (1000, 2048)
    assert "AuxLogits.fc.weight" not in inception_v3(aux_logits=False).state_dict()


def test_model_trains_a_step(rng):
    model = inception_v3(num_classes=5, aux_logits=False)
    x = jt.array(rng.standard_normal((2, 3, 75, 75)).astype(np.float32))
    out = model(x)
    assert out.shape == (2, 5)
    opt = jt.nn.SGD(model.parameters(), 0.01)
    before = model.fc.weight.numpy().copy()
    opt.step(jt.nn.cross_entropy_loss(out, jt.array([1, 3])))
    assert not np.allclose(model.fc.weight.numpy(), before)
    model.eval()
    np.testing.assert_array_equal(model(x).numpy(), model(x).numpy())      # no dropout in eval


def test_aux_logits_at_full_size(rng):
    model = inception_v3(num_classes=4)
    model.eval()
    x = jt.array(rng.standard_normal((1, 3, 299, 299)).astype(np.float32))
    logits, aux = model.forward_aux(x)
    assert logits.shape == (1, 4) and aux.shape == (1, 4)
    np.testing.assert_allclose(logits.numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)
    assert inception_v3(num_classes=4, aux_logits=False).forward_aux(jt.zeros(1, 3, 75, 75))[1] is None


def test_pretrained_and_bad_blocks_are_errors():
    with pytest.raises(ValueError, match="downloads no weights"):
        inception_v3(pretrained=True)
    with pytest.raises(ValueError, match="must list 7 classes, got 2"):
        inception.Inception3(inception_blocks=[inception.BasicConv2d, inception.InceptionA])
