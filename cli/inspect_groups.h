/* inspect_groups.h - `pagellm inspect`'s layer-groups section: for a model
 * with local sliding-window layers beside global ones, the bytes each
 * group holds for one sequence at the train context, against one table. */
#ifndef PL_CLI_INSPECT_GROUPS_H
#define PL_CLI_INSPECT_GROUPS_H

#include <jansson.h>

#include "pagellm.h"

/* Prints the section (nothing for a model without layer groups). */
void inspect_groups_print(const pl_file_info *in, int block);
/* The same as a JSON object, or NULL for a model without layer groups. */
json_t *inspect_groups_json(const pl_file_info *in, int block);

#endif
