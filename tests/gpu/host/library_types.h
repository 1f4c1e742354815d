/* library_types.h - the data types of the host emulation's cuBLAS surface
 * (tests/gpu/host), with the CUDA toolkit's values. */
#ifndef SHOAL_TESTS_GPU_HOST_LIBRARY_TYPES_H
#define SHOAL_TESTS_GPU_HOST_LIBRARY_TYPES_H

typedef enum cudaDataType_t {
    CUDA_R_32F = 0,  /* float */
    CUDA_R_16BF = 14 /* __nv_bfloat16 */
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;

#endif
