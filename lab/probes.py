"""What a model computes inside: the outputs of some of its modules on one input, by forward hooks."""
import torch


def outputs(model, modules, idx):
    """Each module's output (detached) on model(idx), in the order the modules ran, without gradients."""
    got = []
    hooks = [m.register_forward_hook(lambda m, i, o: got.append(o)) for m in modules]
    try:
        with torch.no_grad():
            model(idx)
    finally:
        for h in hooks:
            h.remove()
    return got
