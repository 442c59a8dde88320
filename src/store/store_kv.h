/* store_kv.h - moving full KV blocks between the RAM pool (src/kv) and the
 * tiers (store.h): publishing newly keyed blocks, and loading the blocks a
 * lookup found into fresh pool blocks that the prefix cache then knows.
 *
 * Keys are the prefix cache's (prefix_chain_keys); a block's bytes are its
 * whole extent in the pool (all layers' K and V planes, kv_block_data), so
 * a loaded block is bit for bit the block that was written.
 */
#ifndef PL_STORE_KV_H
#define PL_STORE_KV_H

#include <stdint.h>

#include "kv/prefix_cache.h"
#include "store/store.h"

/* Queues the keyed full blocks [from, to) of seq's chain to the tiers:
 * tokens[0] and seq->table[0] are those of chain block `base` (SWA drops
 * the front; 0 otherwise), parent = the key of block from - 1 (PREFIX_ROOT
 * for 0). Stops at the first block without a key (a collision). */
void store_kv_publish(store *st, const kv_pool *pool, const kv_seq *seq, const int32_t *tokens, uint32_t base,
                      uint32_t from, uint32_t to, const uint64_t parent[2]);

/* seq (paged) holds exactly cur->n_blocks full blocks of tokens, as
 * prefix_attach left it; blocks[j] holds the K/V of chain block
 * cur->n_blocks + j, verified by the store. Copies them into fresh pool
 * blocks pushed onto seq while more than `reserve` blocks stay available,
 * and keys them (prefix_register). Returns the blocks loaded. */
uint32_t store_kv_load(prefix_cache *pc, kv_seq *seq, prefix_cursor *cur, const int32_t *tokens,
                       const uint8_t *const *blocks, uint32_t n, uint32_t reserve);

#endif
