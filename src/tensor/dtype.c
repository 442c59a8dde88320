/* dtype.c - the ggml type table; see dtype.h. */
#include "dtype.h"

#include <stddef.h>
#include <strings.h>

static const dtype_traits traits[DT_COUNT] = {
    [DT_F32] = {"f32", 1, 4, true},
    [DT_F16] = {"f16", 1, 2, true},
    [DT_Q4_0] = {"q4_0", 32, 18, true},
    [DT_Q4_1] = {"q4_1", 32, 20, true},
    [DT_Q5_0] = {"q5_0", 32, 22, true},
    [DT_Q5_1] = {"q5_1", 32, 24, true},
    [DT_Q8_0] = {"q8_0", 32, 34, true},
    [DT_Q8_1] = {"q8_1", 32, 36, false},
    [DT_Q2_K] = {"q2_K", 256, 84, true},
    [DT_Q3_K] = {"q3_K", 256, 110, true},
    [DT_Q4_K] = {"q4_K", 256, 144, true},
    [DT_Q5_K] = {"q5_K", 256, 176, true},
    [DT_Q6_K] = {"q6_K", 256, 210, true},
    [DT_Q8_K] = {"q8_K", 256, 292, false},
    [DT_IQ2_XXS] = {"iq2_xxs", 256, 66, true},
    [DT_IQ2_XS] = {"iq2_xs", 256, 74, true},
    [DT_IQ3_XXS] = {"iq3_xxs", 256, 98, true},
    [DT_IQ1_S] = {"iq1_s", 256, 50, true},
    [DT_IQ4_NL] = {"iq4_nl", 32, 18, true},
    [DT_IQ3_S] = {"iq3_s", 256, 110, true},
    [DT_IQ2_S] = {"iq2_s", 256, 82, true},
    [DT_IQ4_XS] = {"iq4_xs", 256, 136, true},
    [DT_I8] = {"i8", 1, 1, false},
    [DT_I16] = {"i16", 1, 2, false},
    [DT_I32] = {"i32", 1, 4, false},
    [DT_I64] = {"i64", 1, 8, false},
    [DT_F64] = {"f64", 1, 8, false},
    [DT_IQ1_M] = {"iq1_m", 256, 56, true},
    [DT_BF16] = {"bf16", 1, 2, true},
    [DT_TQ1_0] = {"tq1_0", 256, 54, true},
    [DT_TQ2_0] = {"tq2_0", 256, 66, true},
    [DT_MXFP4] = {"mxfp4", 32, 17, false},
};

const dtype_traits *dtype_get(uint32_t t)
{
    if (t >= DT_COUNT || traits[t].name == NULL) return NULL;
    return &traits[t];
}

uint64_t dtype_row_bytes(uint32_t t, uint64_t n)
{
    const dtype_traits *tr = dtype_get(t);
    if (!tr || n % tr->blck_size != 0) return 0;
    return n / tr->blck_size * tr->type_size;
}

int dtype_from_name(const char *name)
{
    for (int t = 0; t < DT_COUNT; t++)
        if (traits[t].name && strcasecmp(traits[t].name, name) == 0) return t;
    return -1;
}
