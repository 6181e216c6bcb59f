"""Writes deepspeed_rates.inc: the rates DeepSpeed's own lr_schedules.py gives each optimizer step,
for the cases tests/lr_schedule_test.cpp checks zinf's schedules against bit for bit.

    python3 deepspeed_rates.py PATH/TO/deepspeed/runtime/lr_schedules.py > deepspeed_rates.inc

The scheduler is driven as DeepSpeed's engine drives it: built before step 1 (its constructor sets
step 1's rate), stepped after every optimizer step. The module needs only torch's Optimizer class
(for isinstance, param_groups and defaults) and DeepSpeed's logger, so both are stood in for here:
the file itself is DeepSpeed's, unmodified. The .inc was made from DeepSpeed commit 38327e0
(February 2025).
"""
import importlib.util
import json
import logging
import sys
import types


class Optimizer:
    def __init__(self, lr, betas):
        self.param_groups = [{'lr': lr, 'betas': betas}]
        self.defaults = {'lr': lr, 'betas': betas}


def load(path):
    torch = types.ModuleType('torch')
    torch.optim = types.ModuleType('torch.optim')
    torch.optim.Optimizer = Optimizer
    utils = types.ModuleType('deepspeed.utils')
    utils.logger = logging.getLogger('deepspeed')
    logging.getLogger('deepspeed').setLevel(logging.ERROR)
    sys.modules.update({'torch': torch, 'torch.optim': torch.optim, 'deepspeed': types.ModuleType('deepspeed'),
                        'deepspeed.utils': utils})
    spec = importlib.util.spec_from_file_location('lr_schedules', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES = [
    ("WarmupLR", {"warmup_min_lr": 1e-5, "warmup_max_lr": 3e-3, "warmup_num_steps": 10}),
    ("WarmupLR", {"warmup_max_lr": 1e-3, "warmup_num_steps": 7, "warmup_type": "linear"}),
    ("WarmupDecayLR", {"total_num_steps": 40, "warmup_min_lr": 0, "warmup_max_lr": 2e-3, "warmup_num_steps": 8}),
    ("WarmupDecayLR", {"total_num_steps": 30, "warmup_max_lr": 1e-3, "warmup_num_steps": 5, "warmup_type": "linear"}),
    ("WarmupCosineLR", {"total_num_steps": 50, "warmup_num_steps": 10, "warmup_min_ratio": 0.05, "cos_min_ratio": 0.1}),
    ("WarmupCosineLR", {"total_num_steps": 20, "warmup_num_steps": 4, "warmup_type": "linear"}),
    ("OneCycle", {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3, "cycle_first_step_size": 10, "cycle_second_step_size": 6,
                  "decay_lr_rate": 0.5, "decay_step_size": 4, "decay_mom_rate": 0.01}),
    ("OneCycle", {"cycle_min_lr": 2e-4, "cycle_max_lr": 4e-4, "cycle_first_step_size": 5, "cycle_momentum": False}),
    ("LRRangeTest", {"lr_range_test_min_lr": 1e-4, "lr_range_test_step_size": 5, "lr_range_test_step_rate": 2.0}),
    ("LRRangeTest", {"lr_range_test_min_lr": 1e-4, "lr_range_test_step_size": 4, "lr_range_test_staircase": True}),
    ("WarmupLR", {}),
]
BASE_LR, BETAS = 6e-4, (0.9, 0.95)
STEPS = [1, 2, 3, 4, 5, 8, 11, 12, 16, 17, 23, 31, 40, 47, 60, 1001, 1002, 2500]


def main():
    schedules = load(sys.argv[1])
    print("// Made by deepspeed_rates.py from DeepSpeed's lr_schedules.py: {type, params JSON, base lr, beta1, beta2,")
    print("// {{step, lr, beta1, beta2}, ...}}. Do not edit by hand.")
    for name, params in CASES:
        opt = Optimizer(BASE_LR, BETAS)
        scheduler = getattr(schedules, name)(opt, **params)
        rows = []
        for k in range(1, max(STEPS) + 1):
            g = opt.param_groups[0]
            if k in STEPS:
                rows.append("{%d, %r, %r, %r}" % (k, float(g['lr']), float(g['betas'][0]), float(g['betas'][1])))
            scheduler.step()
        print('{"%s", R"(%s)", %r, %r, %r,\n {%s}},' % (name, json.dumps(params), BASE_LR, BETAS[0], BETAS[1],
                                                       ",\n  ".join(rows)))


if __name__ == '__main__':
    main()
