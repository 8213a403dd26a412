"""
The first GPU command's phase 1: the environment (python, torch, triton, CUDA and cuDNN versions,
the GPU, its free and total memory, the SDPA backends enabled, the cores, the code).
"""

import os
import shutil
import subprocess
import sys

from lab.gpu_first_base import code_ids, first_line


# ----------------------------------------------------------------------------- 1. environment


def phase_env(ctx):
    import platform
    import torch
    c, e = ctx.c, {}
    e['python'] = platform.python_version()
    e['executable'] = sys.executable
    e['torch'] = torch.__version__
    e['cuda'] = torch.version.cuda
    try:
        import triton
        e['triton'] = triton.__version__
    except Exception as ex:     # noqa: BLE001
        e['triton'] = f'absent ({first_line(ex)})'
    e['cpu_cores'] = os.cpu_count()
    try:
        e['usable_cores'] = len(os.sched_getaffinity(0))
    except AttributeError:
        e['usable_cores'] = os.cpu_count()
    e['torch_threads'] = torch.get_num_threads()
    e['device'] = ctx.dev
    e['cuda_available'] = torch.cuda.is_available()
    e['inductor_cache'] = os.environ.get('TORCHINDUCTOR_CACHE_DIR', '(default: /tmp/torchinductor_<user>)')
    if ctx.dev.startswith('cuda'):
        i = torch.device(ctx.dev).index or 0
        p = torch.cuda.get_device_properties(i)
        free, total = torch.cuda.mem_get_info(i)
        e.update(gpu=torch.cuda.get_device_name(i), capability='.'.join(map(str, torch.cuda.get_device_capability(i))),
                 sm_count=p.multi_processor_count, mem_free_mib=round(free / 2**20), mem_total_mib=round(total / 2**20),
                 gpus=torch.cuda.device_count(), bf16=torch.cuda.is_bf16_supported(),
                 cudnn=torch.backends.cudnn.version())
        sdpa = {}
        for name in ('flash_sdp_enabled', 'mem_efficient_sdp_enabled', 'math_sdp_enabled', 'cudnn_sdp_enabled',
                     'is_flash_attention_available'):
            fn = getattr(torch.backends.cuda, name, None)
            sdpa[name] = fn() if fn else 'absent in this torch'
        e['sdpa'] = sdpa
        e['tf32'] = dict(matmul=torch.backends.cuda.matmul.allow_tf32, cudnn=torch.backends.cudnn.allow_tf32)
        try:
            smi = subprocess.run(['nvidia-smi', '--query-gpu=name,driver_version,memory.total,clocks.max.sm,'
                                  'power.limit', '--format=csv,noheader'], capture_output=True, text=True, timeout=10)
            e['nvidia_smi'] = smi.stdout.strip() or smi.stderr.strip()[:200]
        except (OSError, subprocess.SubprocessError) as ex:
            e['nvidia_smi'] = f'not run: {first_line(ex)}'
    try:
        du = shutil.disk_usage(os.path.dirname(os.path.abspath(c.scratch)) or '/')
        e['scratch_free_gib'] = round(du.free / 2**30, 1)
    except OSError:
        pass
    e['code'] = code_ids()
    ctx.env.update(e)
    ctx.say(f"env: python {e['python']}, torch {e['torch']}, CUDA {e['cuda']}, triton {e['triton']}, "
            f"{e.get('gpu', 'no GPU')}, {e['cpu_cores']} cores"
            + (f", {e['mem_free_mib']:,} of {e['mem_total_mib']:,} MiB free, SDPA {e['sdpa']}" if 'gpu' in e else ''))
