# The FourierQK paper's DC-QK as its frequency-ablation script computes it (docs/variants.md §4):
# a fixed Gaussian band of width 2 bins centred on bin 0, L2-normalised, bilateral FFT. LEAKS
# (unlike dc_qk, the pure bin-0 filter of the follow-up, it keeps the low bins 1, 2, 3...)
attn = 'dc_gauss_qk'
fourier_sf = 2.0        # the published band width, 2 bins
out_dir = 'out-dc_gauss_qk'
