// llama_stream: one greedy stream through llama.cpp's C API, no wrapper,
// timed the way scripts/bench-vs-llama.sh times ovrun (built by it against
// the libllama that scripts/bench-serve.sh --install-only builds in .cache).
//
//   llama_stream MODEL.gguf CTX THREADS N_DECODE PROMPT_IDS(comma-separated)
//
// Prints one JSON object: ready_s (main to the model and context ready for
// the prompt: load, mmap, context and KV allocation), prefill_s (the prompt
// in one llama_decode, to its logits), decode_s and decode_tok_s (N_DECODE
// greedy steps, one token each), the tokens (the prompt's prediction first),
// and peak_rss_bytes (VmHWM).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long long peak_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kb = -1;
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "VmHWM:", 6) == 0) kb = atoll(line + 6);
    }
    if (f) fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

static void quiet(enum ggml_log_level level, const char *text, void *data) {
    (void)level; (void)text; (void)data;
}

static llama_token argmax(const float *logits, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) {
        if (logits[i] > logits[best]) best = i;
    }
    return best;
}

int main(int argc, char **argv) {
    double t0 = now();
    if (argc != 6) {
        fprintf(stderr, "usage: llama_stream MODEL.gguf CTX THREADS N_DECODE PROMPT_IDS\n");
        return 2;
    }
    int n_ctx = atoi(argv[2]), threads = atoi(argv[3]), n_decode = atoi(argv[4]);
    int cap = 1, n_prompt = 0;
    for (const char *p = argv[5]; *p; p++) cap += *p == ',';
    llama_token *prompt = calloc(cap, sizeof *prompt);
    for (char *tok = strtok(argv[5], ","); tok; tok = strtok(NULL, ",")) prompt[n_prompt++] = atoi(tok);
    if (n_ctx < 1 || threads < 1 || n_decode < 0 || n_prompt < 1 || n_prompt + n_decode > n_ctx) {
        fprintf(stderr, "llama_stream: want CTX >= prompt (%d) + N_DECODE (%d), THREADS >= 1\n", n_prompt, n_decode);
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "llama_stream: cannot load %s\n", argv[1]);
        return 1;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_ctx;
    cp.n_ubatch = n_ctx;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "llama_stream: cannot make a context of %d\n", n_ctx);
        return 1;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int n_vocab = llama_vocab_n_tokens(vocab);
    double t1 = now();

    if (llama_decode(ctx, llama_batch_get_one(prompt, n_prompt)) != 0) {
        fprintf(stderr, "llama_stream: prefill failed\n");
        return 1;
    }
    llama_token next = argmax(llama_get_logits_ith(ctx, -1), n_vocab);
    double t2 = now();
    llama_token *out = calloc(n_decode + 1, sizeof *out);
    out[0] = next;
    for (int i = 0; i < n_decode; i++) {
        if (llama_decode(ctx, llama_batch_get_one(&out[i], 1)) != 0) {
            fprintf(stderr, "llama_stream: decode step %d failed\n", i);
            return 1;
        }
        out[i + 1] = argmax(llama_get_logits_ith(ctx, -1), n_vocab);
    }
    double t3 = now();
    printf("{\"ready_s\": %.6f, \"prefill_s\": %.6f, \"decode_s\": %.6f, \"decode_tok_s\": %.3f, \"peak_rss_bytes\": %lld, \"tokens\": [",
           t1 - t0, t2 - t1, t3 - t2, n_decode > 0 ? n_decode / (t3 - t2) : 0.0, peak_rss());
    for (int i = 0; i <= n_decode; i++) printf("%s%d", i ? ", " : "", out[i]);
    printf("]}\n");
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
