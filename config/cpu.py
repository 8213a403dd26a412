# Overlay: the CPU study scale used for every comparison on a 2-core machine.
#   python train.py config/ega_mope.py config/cpu.py
n_layer = 4
n_head = 4
n_embd = 128
block_size = 128
batch_size = 16
dropout = 0.0
learning_rate = 1e-3
min_lr = 1e-4
warmup_iters = 100
max_iters = 2000
eval_interval = 250
eval_iters = 20          # 20 fixed validation batches
device = 'cpu'
compile = False
out_dir = out_dir + '-cpu'   # keeps CPU runs apart from paper-scale ones
