/* store_kv.h - moving full KV blocks between the RAM pool (src/kv) and the
 * tiers (store.h): publishing newly keyed blocks, and loading the blocks a
 * lookup found into fresh pool blocks that the prefix cache then knows.
 *
 * Keys are the prefix cache's (prefix_chain_keys); a block's bytes are its
 * serialized form (all layers' K and V planes, kv_block_save), so
 * a loaded block is bit for bit the block that was written.
 *
 * Layer groups (kv/kv_groups.h): one entry per chain block holds that
 * position's block of every group, global first, then local groups 1..:
 * payload = n_groups x the pool's block bytes, keyed by the global chain
 * (whose salt names the group geometry: rt_groups_fingerprint). Why one
 * entry and not one per group: all the groups' bytes of a position exist
 * when its global block is sealed, one lookup walks one chain, and a hit
 * can never find a global block without its local partners (per-group
 * chains would need a second lookup, after the first told the hit length,
 * to know which window to ask for). The cost: a load reads the local
 * groups' bytes of positions behind the window too, and drops them
 * (docs/kv-tiers.md#layer-groups).
 */
#ifndef PL_STORE_KV_H
#define PL_STORE_KV_H

#include <stdint.h>

#include "kv/kv_groups.h"
#include "kv/prefix_cache.h"
#include "store/store.h"

/* Queues the keyed full blocks [from, to) of seq's chain to the tiers:
 * tokens[0] and seq->table[0] are those of chain block `base` (SWA drops
 * the front; 0 otherwise), parent = the key of block from - 1 (PREFIX_ROOT
 * for 0). Stops at the first block without a key (a collision). Each
 * block's layers are gathered (kv_block_save) straight into its entry,
 * and only when the store takes it (store_put_block_fill). */
void store_kv_publish(store *st, const kv_pool *pool, const kv_seq *seq, const int32_t *tokens, uint32_t base,
                      uint32_t from, uint32_t to, const uint64_t parent[2]);

/* store_kv_publish for a context with layer groups: global table seq
 * (tokens[0] and table[0] are chain block 0), local tables lg of
 * n_groups - 1 groups. Each entry gathers the block of every group
 * (n_groups x block bytes, global first). A block whose local partners the
 * window already dropped is skipped (a re-walk after a truncate: it was
 * written when sealed). */
void store_kv_publish_groups(store *st, const kv_pool *pool, const kv_seq *seq, const kv_glocal *lg,
                             uint32_t n_groups, const int32_t *tokens, uint32_t from, uint32_t to,
                             const uint64_t parent[2]);

/* seq (paged) holds exactly cur->n_blocks full blocks of tokens, as
 * prefix_attach left it; blocks[j] holds the K/V of chain block
 * cur->n_blocks + j, verified by the store. Copies them into fresh pool
 * blocks pushed onto seq while more than `reserve` blocks stay available,
 * and keys them (prefix_register). Returns the blocks loaded. */
uint32_t store_kv_load(prefix_cache *pc, kv_seq *seq, prefix_cursor *cur, const int32_t *tokens,
                       const uint8_t *const *blocks, uint32_t n, uint32_t reserve);

#endif
