/* A stand-in for the NVIDIA driver library (libcuda.so.1): the NCCL
 * backend only checks that it loads. */
int fake_libcuda_present(void) { return 1; }
