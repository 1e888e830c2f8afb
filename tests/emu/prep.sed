# tests/emu/prep.sed: a kernels/cuda/*.cu file as host C++ for the emulator (tests/emu/emu.cpp):
# kernel launches k<<<grid, block, smem, stream>>>(args) become emu_launch(k, grid, block, smem,
# stream)(args), the dynamic shared-memory array becomes a pointer to the emulated block's, and
# a static __shared__ array (a C++ static there) is filled with NaNs by the first thread of each
# block that reaches it (emu_static_smem).
s/extern __shared__ __align__\([0-9]+\) unsigned char ([A-Za-z_][A-Za-z_0-9]*)\[\];/unsigned char *\1 = emu_dyn_smem();/
s/([A-Za-z_][A-Za-z_0-9]*(<[A-Za-z_0-9]+>)?)<<<(.*)>>>/emu_launch(\1, \3)/
s/__shared__ ([A-Za-z_][A-Za-z_0-9 ]*[A-Za-z_0-9]) ([A-Za-z_][A-Za-z_0-9]*)\[([^]]+)\];/__shared__ \1 \2[\3]; emu_static_smem(\2, sizeof \2);/
