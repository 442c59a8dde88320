/* api_impl.h - inside src/api: what one api file needs of another. */
#ifndef PL_API_API_IMPL_H
#define PL_API_API_IMPL_H

#include "model/model.h"
#include "pagellm.h"

/* The model behind a public handle (api_model.c). */
const model *api_model_get(const pl_model *pm);
/* A context was made from the model: its configuration is fixed from now on. */
void api_model_mark_used(pl_model *pm);

#endif
