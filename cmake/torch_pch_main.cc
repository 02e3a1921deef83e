// Anchor for the precompiled torch/torch.h of executables.
int main() { return 0; }
