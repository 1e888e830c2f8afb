# tests/emu/prep.sed: a kernels/cuda/*.cu file as host C++ for the emulator (tests/emu/emu.cpp):
# kernel launches k<<<grid, block, smem, stream>>>(args) become emu_launch(k, grid, block, smem,
# stream)(args), and the dynamic shared-memory array becomes a pointer to the emulated block's.
s/extern __shared__ __align__\([0-9]+\) unsigned char ([A-Za-z_][A-Za-z_0-9]*)\[\];/unsigned char *\1 = emu_dyn_smem();/
s/([A-Za-z_][A-Za-z_0-9]*(<[A-Za-z_0-9]+>)?)<<<(.*)>>>/emu_launch(\1, \3)/
