/* test_sample.c - samplers, stop strings and chat templates. */
#include "test.h"

#include "engine/chat_template.h"
#include "pagellm.h"

static pl_sampler *mk(float temp, int k, float p, float minp, float pen, uint64_t seed, int n)
{
    pl_sampler_params sp = {temp, k, p, minp, pen, 64, seed};
    pl_sampler *s = NULL;
    return pl_sampler_new(&s, &sp, n) == 0 ? s : NULL;
}

TEST(greedy_is_argmax_lowest_id_on_ties)
{
    float l[6] = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f, 0.0f};
    pl_sampler *s = mk(0, 40, 0.95f, 0.05f, 1, 0, 6);
    CHECK(s);
    CHECK_EQ_INT(pl_sampler_sample(s, l, NULL, 0), 1);
    pl_sampler_free(s);
}

TEST(top_k_1_equals_greedy_at_any_temperature)
{
    float l[100];
    for (int i = 0; i < 100; i++) l[i] = (float)((i * 37) % 100) / 10.0f;
    int best = 0;
    for (int i = 1; i < 100; i++) if (l[i] > l[best]) best = i;
    pl_sampler *s = mk(1.5f, 1, 1, 0, 1, 42, 100);
    CHECK(s);
    for (int t = 0; t < 50; t++) CHECK_EQ_INT(pl_sampler_sample(s, l, NULL, 0), best);
    pl_sampler_free(s);
}

TEST(same_seed_same_tokens_other_seed_differs)
{
    float l[64];
    for (int i = 0; i < 64; i++) l[i] = 0.01f * (float)i;
    pl_sampler *a = mk(1, 0, 1, 0, 1, 7, 64), *b = mk(1, 0, 1, 0, 1, 7, 64), *c = mk(1, 0, 1, 0, 1, 8, 64);
    CHECK(a && b && c);
    int diff = 0;
    for (int t = 0; t < 200; t++) {
        int x = pl_sampler_sample(a, l, NULL, 0), y = pl_sampler_sample(b, l, NULL, 0), z = pl_sampler_sample(c, l, NULL, 0);
        CHECK_EQ_INT(x, y);
        diff += x != z;
    }
    CHECK(diff > 100);
    pl_sampler_free(a); pl_sampler_free(b); pl_sampler_free(c);
}

TEST(temperature_one_follows_softmax)
{
    /* logits log(0.5), log(0.3), log(0.2): frequencies must follow */
    float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    pl_sampler *s = mk(1, 0, 1, 0, 1, 123, 3);
    CHECK(s);
    int cnt[3] = {0};
    for (int t = 0; t < 20000; t++) cnt[pl_sampler_sample(s, l, NULL, 0)]++;
    CHECK_NEAR(cnt[0] / 20000.0, 0.5, 0.02);
    CHECK_NEAR(cnt[1] / 20000.0, 0.3, 0.02);
    CHECK_NEAR(cnt[2] / 20000.0, 0.2, 0.02);
    pl_sampler_free(s);
}

TEST(top_p_and_min_p_cut_the_tail)
{
    float l[4] = {logf(0.6f), logf(0.25f), logf(0.1f), logf(0.05f)};
    pl_sampler *p = mk(1, 0, 0.8f, 0, 1, 5, 4);   /* keeps 0.6 + 0.25 */
    pl_sampler *m = mk(1, 0, 1, 0.3f, 1, 5, 4);   /* keeps p >= 0.18 */
    CHECK(p && m);
    for (int t = 0; t < 3000; t++) {
        CHECK(pl_sampler_sample(p, l, NULL, 0) < 2);
        CHECK(pl_sampler_sample(m, l, NULL, 0) < 2);
    }
    pl_sampler_free(p); pl_sampler_free(m);
}

TEST(repetition_penalty_moves_greedy_choice)
{
    float l[3] = {2.0f, 1.9f, -5.0f};
    int32_t hist[2] = {0, 0};
    pl_sampler *s = mk(0, 0, 1, 0, 1.5f, 0, 3);
    CHECK(s);
    CHECK_EQ_INT(pl_sampler_sample(s, l, NULL, 0), 0);
    CHECK_EQ_INT(pl_sampler_sample(s, l, hist, 2), 1); /* 2.0/1.5 < 1.9 */
    CHECK(l[0] == 2.0f); /* logits are not modified */
    pl_sampler_free(s);
}

TEST(bad_sampler_params_are_refused)
{
    pl_sampler_params sp;
    pl_sampler_params_default(&sp);
    pl_sampler *s = NULL;
    sp.top_p = 1.5f;
    CHECK(pl_sampler_new(&s, &sp, 10) == PL_ERR_INVAL);
    CHECK(strstr(pl_last_error(), "top_p"));
    pl_sampler_params_default(&sp);
    sp.temperature = -1;
    CHECK(pl_sampler_new(&s, &sp, 10) == PL_ERR_INVAL);
    CHECK(s == NULL);
}

TEST(stop_strings_hold_back_and_cut)
{
    const char *stops[] = {"END", "\nUser:"};
    pl_stop *s = pl_stop_new(stops, 2);
    CHECK(s);
    char out[256];
    bool stopped = false;
    CHECK_EQ_INT(pl_stop_feed(s, "hello E", 7, out, &stopped), 6);
    CHECK_STR(out, "hello ");
    CHECK(!stopped);
    CHECK_EQ_INT(pl_stop_feed(s, "N", 1, out, &stopped), 0); /* "EN" may still become END */
    CHECK_EQ_INT(pl_stop_feed(s, "o", 1, out, &stopped), 3);
    CHECK_STR(out, "ENo");
    CHECK_EQ_INT(pl_stop_feed(s, " and\nUs", 7, out, &stopped), 4);
    CHECK_STR(out, " and");
    pl_stop_feed(s, "er: x", 5, out, &stopped);
    CHECK(stopped);
    CHECK_STR(out, "");
    CHECK_EQ_INT(pl_stop_flush(s, out), 0);
    pl_stop_free(s);
    s = pl_stop_new(stops, 2);
    pl_stop_feed(s, "abc E", 5, out, &stopped);
    CHECK_EQ_INT(pl_stop_flush(s, out), 1);
    CHECK_STR(out, "E");
    pl_stop_free(s);
}

static char *render(const char *tpl, bool opener, const char **name)
{
    pl_chat_msg m[] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};
    char *out = NULL;
    return chat_render(tpl, m, 4, opener, &out, name) == 0 ? out : NULL;
}

TEST(chat_templates_render_the_known_families)
{
    const char *name;
    char *s = render("{% for m in messages %}<|im_start|>{{m.role}}...", true, &name);
    CHECK_STR(name, "chatml");
    CHECK_STR(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
                 "Hello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
    free(s);
    s = render("<|start_header_id|>", true, &name);
    CHECK_STR(name, "llama3");
    CHECK(strstr(s, "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"));
    const char *opener = "<|start_header_id|>assistant<|end_header_id|>\n\n";
    CHECK(strlen(s) > strlen(opener) && strcmp(s + strlen(s) - strlen(opener), opener) == 0);
    free(s);
    s = render("[INST] <<SYS>>", false, &name);
    CHECK_STR(name, "llama2");
    CHECK_STR(s, "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello</s>[INST] Bye [/INST]");
    free(s);
    s = render("<start_of_turn>", true, &name);
    CHECK_STR(name, "gemma");
    CHECK_STR(s, "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
                 "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
    free(s);
    s = render("<|assistant|> <|end|>", true, &name);
    CHECK_STR(name, "phi3");
    free(s);
    s = render("<|assistant|>", true, &name);
    CHECK_STR(name, "zephyr");
    free(s);
    s = render(NULL, true, &name);
    CHECK_STR(name, "plain");
    CHECK_STR(s, "System: Be brief.\n\nUser: Hi\n\nAssistant: Hello\n\nUser: Bye\n\nAssistant:");
    free(s);
}

TEST(chat_render_refuses_unknown_roles)
{
    pl_chat_msg m[] = {{"robot", "x"}};
    char *out = NULL;
    CHECK(chat_render(NULL, m, 1, true, &out, NULL) == PL_ERR_INVAL);
    CHECK(strstr(pl_last_error(), "messages[0].role"));
    CHECK(out == NULL);
}

int main(void)
{
    RUN(greedy_is_argmax_lowest_id_on_ties);
    RUN(top_k_1_equals_greedy_at_any_temperature);
    RUN(same_seed_same_tokens_other_seed_differs);
    RUN(temperature_one_follows_softmax);
    RUN(top_p_and_min_p_cut_the_tail);
    RUN(repetition_penalty_moves_greedy_choice);
    RUN(bad_sampler_params_are_refused);
    RUN(stop_strings_hold_back_and_cut);
    RUN(chat_templates_render_the_known_families);
    RUN(chat_render_refuses_unknown_roles);
    return test_summary();
}
