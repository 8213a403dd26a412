# Ours (docs/variants.md §4): FourierQK's learned band as a one-sided kernel over the whole
# window, applied by an FFT convolution zero-padded to 2T. Causal
attn = 'fourier_qk_causal'
fourier_sf = 2.0        # the published band width, 2 bins
out_dir = 'out-fourier_qk_causal'
