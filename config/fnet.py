# FNet (Lee-Thorp et al. 2021; docs/variants.md §4): attention replaced by
# Re(FFT_time(FFT_channels(x))). LEAKS
attn = 'fnet'
out_dir = 'out-fnet'
