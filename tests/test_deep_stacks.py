"""Tests for studies/deep_stacks.py: the five arrangements, the gradient measurements,
and the side-by-side training (each run equals training that model alone with torch.optim.Adam).
"""

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from transformer_tutorial.studies.deep_stacks import (
    ARRANGEMENTS,
    Classifier,
    DeepStack,
    StackConfig,
    TeacherTask,
    TrainingConfig,
    branch_to_skip_ratios,
    gradient_profile,
    input_gradient_norms,
    train_side_by_side,
    warmup_factor,
)
from transformer_tutorial.studies.reproducible import reproducible_training


def _generator(seed):
    return torch.Generator().manual_seed(seed)


def _x(shape, seed=0, dtype=torch.float64):
    return torch.randn(shape, generator=_generator(seed), dtype=dtype)


def test_config_defaults_and_final_norm():
    config = StackConfig()
    assert config.d_ff == 4 * config.d_model
    assert [StackConfig(arrangement=a).uses_final_norm for a in ARRANGEMENTS] == [
        False,
        False,
        False,
        False,
        True,
    ]
    assert StackConfig(arrangement="pre-LN", final_norm=False).uses_final_norm is False
    assert StackConfig(arrangement="residual only", final_norm=True).uses_final_norm is True


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"arrangement": "post-ln"}, "arrangement must be one of"),
        ({"sublayers": "attention"}, "sublayers must be one of"),
        ({"num_layers": 0}, "num_layers must be a positive int"),
        ({"d_model": 30, "num_heads": 4}, "does not divide d_model"),
        ({"d_ff": 0}, "d_ff must be a positive int"),
        ({"seed": -1}, "seed must be a non-negative int"),
        ({"init": "xavier"}, "init must be one of"),
    ],
)
def test_config_rejects_bad_values(changes, message):
    with pytest.raises(ValueError, match=message):
        StackConfig(**changes)


def test_feed_forward_only_stacks_accept_any_head_count():
    StackConfig(d_model=30, num_heads=4, sublayers="ffn")  # no attention, no constraint


@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
def test_each_arrangement_computes_its_formula(arrangement):
    config = StackConfig(arrangement, num_layers=1, d_model=8, sublayers="ffn")
    stack = DeepStack(config).double()
    layer = stack.layers[0]
    f = layer.feed_forward
    norm = F.layer_norm  # a fresh LayerNorm: gain 1, bias 0, eps 1e-5
    x = _x((2, 3, 8))
    expected = {
        "plain": lambda: f(x),
        "norm only": lambda: norm(f(x), (8,)),
        "residual only": lambda: x + f(x),
        "post-LN": lambda: norm(x + f(x), (8,)),
        "pre-LN": lambda: norm(x + f(norm(x, (8,))), (8,)),  # then the final norm
    }[arrangement]()
    torch.testing.assert_close(stack(x), expected)


def test_attention_layer_wraps_attention_then_feed_forward():
    config = StackConfig("pre-LN", num_layers=1, d_model=8, num_heads=2, final_norm=False)
    stack = DeepStack(config).double()
    layer = stack.layers[0]
    x = _x((2, 5, 8))
    middle = x + layer.attention(F.layer_norm(x, (8,)))[0]
    expected = middle + layer.feed_forward(F.layer_norm(middle, (8,)))
    torch.testing.assert_close(stack(x), expected)


@pytest.mark.parametrize("sublayers", ["attention+ffn", "ffn"])
def test_a_deeper_stack_starts_with_the_shallower_one(sublayers):
    shallow = DeepStack(StackConfig("post-LN", 3, 8, 2, sublayers=sublayers, seed=4))
    deep = DeepStack(StackConfig("post-LN", 7, 8, 2, sublayers=sublayers, seed=4))
    x = _x((2, 4, 8), dtype=torch.float32)
    torch.testing.assert_close(deep.residual_stream(x, 3)[-1], shallow(x), rtol=0, atol=0)
    other_seed = DeepStack(StackConfig("post-LN", 3, 8, 2, sublayers=sublayers, seed=5))
    assert not torch.allclose(other_seed(x), shallow(x))


@pytest.mark.parametrize("sublayers", ["attention+ffn", "ffn"])
def test_unit_variance_init_keeps_the_size_of_the_calibration_batch(sublayers):
    config = StackConfig("plain", 5, 8, 2, sublayers=sublayers, seed=3, init="unit variance")
    stack = DeepStack(config).double()
    calibration = torch.randn((8, 16, 8), generator=_generator(20_003), dtype=torch.float64)
    sizes = [state.norm().item() for state in stack.residual_stream(calibration)]
    np.testing.assert_allclose(sizes, sizes[0], rtol=1e-5)  # float32 weights: not exactly
    default = DeepStack(replace(config, init="default")).double()
    assert default.residual_stream(calibration)[-1].norm() < 0.5 * sizes[0]  # it shrinks
    for mine, theirs in zip(stack.layers, default.layers, strict=True):  # only W_O, W_2 change
        torch.testing.assert_close(mine.feed_forward.W_1.weight, theirs.feed_forward.W_1.weight)
        factor = mine.feed_forward.W_2.weight / theirs.feed_forward.W_2.weight
        torch.testing.assert_close(factor, torch.full_like(factor, factor[0, 0].item()))
        torch.testing.assert_close(
            mine.feed_forward.W_2.bias, theirs.feed_forward.W_2.bias * factor[0, 0]
        )
    deeper = DeepStack(replace(config, num_layers=7)).double()  # a prefix: the same weights
    torch.testing.assert_close(
        deeper.residual_stream(calibration, 5)[-1], stack(calibration), rtol=0, atol=0
    )
    assert next(DeepStack(config).parameters()).dtype == torch.float32


def test_residual_stream_shapes_and_errors():
    stack = DeepStack(StackConfig(num_layers=4, d_model=8, num_heads=2))
    x = _x((2, 3, 8), dtype=torch.float32)
    states = stack.residual_stream(x)
    assert len(states) == 5 and all(state.shape == (2, 3, 8) for state in states)
    assert states[0] is x and len(stack.residual_stream(x, 0)) == 1
    with pytest.raises(ValueError, match=r"num_layers must be in 0\.\.4, got 5"):
        stack.residual_stream(x, 5)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, D\) with D = 8, got \(3, 8\)"):
        stack(x[0])
    with pytest.raises(ValueError, match=r"with D = 8, got \(2, 3, 4\)"):
        stack(x[..., :4])


def test_gradient_profile_matches_autograd_by_hand():
    config = StackConfig("post-LN", num_layers=5, d_model=8, num_heads=2)
    stack = DeepStack(config).double()
    profile = gradient_profile(stack, (2, 5), batch_size=3, length=4, seed=9)
    generator = torch.Generator().manual_seed(9)
    x = torch.randn(3, 4, 8, generator=generator, dtype=torch.float64, requires_grad=True)
    direction = torch.randn(3, 4, 8, generator=generator, dtype=torch.float64)
    for index, depth in enumerate((2, 5)):
        output = stack.residual_stream(x, depth)[-1]
        (gradient,) = torch.autograd.grad((output * direction).sum(), x)
        assert profile.input_gradient[index] == pytest.approx(
            (gradient.norm() / direction.norm()).item(), rel=1e-12
        )
        assert profile.stream_std[index] == pytest.approx(output.std().item(), rel=1e-12)
    given = gradient_profile(stack, (2, 5), seed=9, x=x[:, :2].float())  # cast to float64
    direction = torch.randn((3, 2, 8), generator=_generator(9), dtype=torch.float64)
    (gradient,) = torch.autograd.grad((stack(x[:, :2]) * direction).sum(), x)
    assert given.input_gradient[1] == pytest.approx((gradient.norm() / direction.norm()).item())


def test_a_residual_path_around_silent_sublayers_passes_the_gradient_unchanged():
    stack = DeepStack(StackConfig("residual only", num_layers=6, d_model=8, sublayers="ffn"))
    with torch.no_grad():
        for layer in stack.layers:
            layer.feed_forward.W_2.weight.zero_()
            layer.feed_forward.W_2.bias.zero_()
    profile = gradient_profile(stack.double(), (1, 6))
    np.testing.assert_allclose(profile.input_gradient, [1.0, 1.0], rtol=1e-12)
    np.testing.assert_allclose(profile.stream_std, profile.stream_std[0], rtol=1e-12)


def test_measured_trends_of_the_chapter():
    depths = (1, 6, 24)
    profiles = {a: input_gradient_norms(StackConfig(a, d_model=16), depths) for a in ARRANGEMENTS}
    plain = profiles["plain"].input_gradient
    assert plain[0] < 0.1 and plain[-1] < 1e-20 and np.all(np.diff(plain) < 0)  # vanishes
    assert np.all(np.diff(profiles["norm only"].input_gradient) < 0)
    assert np.all(np.diff(profiles["residual only"].stream_std) > 0)  # the stream grows
    np.testing.assert_allclose(profiles["post-LN"].stream_std, 1.0, atol=0.01)  # normalised
    assert np.all(np.diff(profiles["pre-LN"].stream_std) > 0)  # pre-LN's stream grows too
    weakest = profiles["norm only"].input_gradient[-1]
    for arrangement in ("post-LN", "pre-LN"):  # neither vanishes like plain or norm only
        assert profiles[arrangement].input_gradient[-1] > 10 * weakest


def test_input_gradient_norms_of_a_prefix_are_the_same_numbers():
    config = StackConfig("pre-LN", d_model=8, num_heads=2, seed=3)
    both = input_gradient_norms(config, (2, 4))
    alone = input_gradient_norms(config, (2,))
    assert both.input_gradient[0] == alone.input_gradient[0]
    assert both.stream_std[0] == alone.stream_std[0]


@pytest.mark.parametrize(
    ("depths", "message"),
    [
        ((), "depths is empty"),
        ((3, 2), "strictly increasing"),
        ((2, 2), "strictly increasing"),
        ((0, 2), "depths must be a positive int"),
        ((2, 9), "depths go up to 9, the stack has 4 layers"),
    ],
)
def test_gradient_profile_rejects_bad_depths(depths, message):
    stack = DeepStack(StackConfig(num_layers=4, d_model=8, num_heads=2))
    with pytest.raises(ValueError, match=message):
        gradient_profile(stack, depths)


def test_branch_to_skip_ratios():
    stack = DeepStack(StackConfig("pre-LN", num_layers=3, d_model=8, num_heads=2)).double()
    x = _x((2, 4, 8))
    ratios = branch_to_skip_ratios(stack, x)
    assert ratios.shape == (6,)  # 3 layers x (attention, feed-forward)
    first = stack.layers[0].attention(F.layer_norm(x, (8,)))[0]
    assert ratios[0] == pytest.approx((first.norm() / x.norm()).item(), rel=1e-12)
    assert all(wrapper.ratios is None for wrapper in stack.wrappers())  # recording switched off
    torch.testing.assert_close(stack(x), stack(x))


def test_teacher_task():
    task = TeacherTask()
    x, labels = task.batch(4, 5, torch.Generator().manual_seed(0))
    assert x.shape == (4, 5, 16) and labels.shape == (4, 5)
    assert labels.dtype == torch.long and 0 <= labels.min() and labels.max() < 8
    again = TeacherTask().batch(4, 5, torch.Generator().manual_seed(0))
    assert torch.equal(labels, again[1]) and torch.equal(x, again[0])
    baseline = task.baseline_loss()
    assert 1.5 < baseline <= math.log(8)  # all eight classes occur, not quite evenly
    assert len(torch.unique(task.batch(64, 8, torch.Generator().manual_seed(1))[1])) == 8
    with pytest.raises(ValueError, match=r"x must have shape \(..., d_in\) = \(..., 16\)"):
        task.label(torch.zeros(3, 15))
    with pytest.raises(ValueError, match="num_classes must be a positive int"):
        TeacherTask(num_classes=0)


def test_post_and_pre_ln_classifiers_start_from_the_same_weights():
    task = TeacherTask()
    post = Classifier(StackConfig("post-LN", 3, 8, 2, seed=1), task).state_dict()
    pre = Classifier(StackConfig("pre-LN", 3, 8, 2, seed=1), task).state_dict()
    assert set(pre) - set(post) == {"stack.final_norm.gain", "stack.final_norm.bias"}
    for name, value in post.items():
        assert torch.equal(value, pre[name]), name


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"learning_rates": ()}, "learning_rates must be positive"),
        ({"learning_rates": (1e-3, 0.0)}, "learning_rates must be positive"),
        ({"seeds": (0, -1)}, "seeds must be non-negative ints"),
        ({"steps": 0}, "steps must be a positive int"),
        ({"warmup_steps": (0, -1)}, "warmup_steps must be non-negative ints"),
        ({"warmup_steps": ()}, "warmup_steps must be non-negative ints"),
    ],
)
def test_training_config_rejects_bad_values(changes, message):
    with pytest.raises(ValueError, match=message):
        TrainingConfig(**changes)


def test_warm_up_factor_and_run_layout():
    assert warmup_factor(1, 0) == 1.0
    assert [warmup_factor(step, 4) for step in (1, 2, 4, 9)] == [0.25, 0.5, 1.0, 1.0]
    assert TrainingConfig((1e-3, 1e-2), (0, 1, 2), (0, 5)).shape == (3, 2, 2)


def _alone(stack, task, training, seed, rate, warmup):
    """One model trained the ordinary way (an nn.Module and torch.optim.Adam), in float64."""
    model = Classifier(replace(stack, seed=seed), task)
    generator = torch.Generator().manual_seed(20_000 + seed)
    losses = []
    with reproducible_training(model):
        optimiser = torch.optim.Adam(
            model.parameters(), lr=rate, betas=training.betas, eps=training.eps
        )
        for step in range(1, training.steps + 1):
            for group in optimiser.param_groups:
                group["lr"] = rate * warmup_factor(step, warmup)
            x, labels = task.batch(training.batch_size, training.length, generator)
            loss = F.cross_entropy(model(x).flatten(0, 1), labels.flatten())
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            losses.append(loss.item())
    return model, np.array(losses)


@pytest.mark.parametrize(
    ("arrangement", "sublayers", "warmups"),
    [("post-LN", "ffn", (0,)), ("pre-LN", "ffn", (0, 3)), ("post-LN", "attention+ffn", (2,))],
)
def test_every_run_equals_training_that_model_alone_with_torch_adam(
    arrangement, sublayers, warmups
):
    torch.set_num_threads(1)
    stack = StackConfig(arrangement, num_layers=3, d_model=8, num_heads=2, sublayers=sublayers)
    task = TeacherTask(d_in=6, num_classes=4, hidden=8)
    training = TrainingConfig((1e-3, 3e-2), (0, 5), warmups, steps=6, batch_size=3, length=4)
    together = train_side_by_side(stack, task, training)
    assert together.losses.shape == (2, 2, len(warmups), 6)
    for seed_index, seed in enumerate(training.seeds):
        for rate_index, rate in enumerate(training.learning_rates):
            for warmup_index, warmup in enumerate(warmups):
                model, losses = _alone(stack, task, training, seed, rate, warmup)
                np.testing.assert_allclose(
                    together.losses[seed_index, rate_index, warmup_index],
                    losses,
                    rtol=1e-12,
                    atol=0,
                )
                trained = together.model(seed_index, rate_index, warmup_index)
                for (name, ours), theirs in zip(
                    trained.named_parameters(), model.parameters(), strict=True
                ):
                    if name.endswith("W_K.bias"):
                        # q.(k + b) shifts every score of a query by the same q.b, which softmax
                        # ignores: this gradient is rounding noise, and Adam (eps = 1e-9) turns
                        # noise into full-size steps, different for any other order of the sums
                        continue
                    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7, msg=name)
    losses = together.losses
    assert not np.allclose(losses[0, 0, 0], losses[0, 1, 0])  # the rate matters
    assert not np.allclose(losses[0, 0, 0], losses[1, 0, 0])  # so does the seed
    if len(warmups) > 1:
        assert not np.allclose(losses[0, 1, 0], losses[0, 1, 1])  # and the warm-up


def test_side_by_side_model_index_errors():
    stack = StackConfig("pre-LN", num_layers=1, d_model=8, sublayers="ffn")
    result = train_side_by_side(stack, TeacherTask(), TrainingConfig((1e-3,), (0,), steps=1))
    assert isinstance(result.model(0, 0), Classifier)
    message = "need 0 <= seed_index < 1, 0 <= rate_index < 1 and 0 <= warmup_index < 1"
    for indices in ((0, 1), (1, 0), (0, 0, 1), (-1, 0)):
        with pytest.raises(ValueError, match=message):
            result.model(*indices)
