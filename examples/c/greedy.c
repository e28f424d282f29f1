/* Greedy generation through the C API: prints the generated token ids on one line.
 * Usage: greedy [--draft ngram|DRAFT_MODEL] MODEL [N_TOKENS] [ID ...]
 *   (default prompt 1 23 54 200 7, 32 tokens). --draft: speculative decoding, by prompt lookup or
 *   with a draft model (same tokenizer): the same tokens, and the drafted / accepted counts on
 *   stderr. */
#include <lfm/lfm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check(lfm_status s, const char* what) {
  if (s != LFM_OK) fprintf(stderr, "greedy: %s: %s (%s)\n", what, lfm_last_error(), lfm_status_name(s));
  return s == LFM_OK;
}

int main(int argc, char** argv) {
  const char* draft = NULL;
  if (argc > 2 && strcmp(argv[1], "--draft") == 0) {
    draft = argv[2];
    argc -= 2;
    argv += 2;
  }
  if (argc < 2) {
    fprintf(stderr, "usage: greedy [--draft ngram|DRAFT_MODEL] MODEL [N_TOKENS] [ID ...]\n");
    return 2;
  }
  int32_t ids[256] = {1, 23, 54, 200, 7};
  size_t n_ids = 5;
  if (argc > 3) {
    n_ids = 0;
    for (int i = 3; i < argc && n_ids < 256; ++i) ids[n_ids++] = (int32_t)atoi(argv[i]);
  }
  lfm_model* model = NULL;
  lfm_engine* engine = NULL;
  lfm_request* req = NULL;
  lfm_engine_options options;
  lfm_engine_options_init(&options);
  if (draft && strcmp(draft, "ngram") != 0) options.draft_model = draft;
  int ok = check(lfm_model_load(argv[1], NULL, &model), "load") && check(lfm_engine_create(model, &options, &engine), "engine");
  if (ok) {
    lfm_prompt prompt;
    lfm_sampling_params params;
    lfm_prompt_init(&prompt);
    lfm_sampling_params_init(&params);
    prompt.ids = ids;
    prompt.n_ids = n_ids;
    params.max_tokens = argc > 2 ? atoi(argv[2]) : 32;
    params.ignore_eos = 1;
    if (draft) params.drafter = options.draft_model ? LFM_DRAFTER_MODEL : LFM_DRAFTER_NGRAM;
    ok = check(lfm_request_submit(engine, &prompt, &params, &req), "submit");
  }
  while (ok) {
    lfm_event ev;
    ev.struct_size = sizeof(ev);
    ok = check(lfm_request_next(req, &ev, -1), "next");
    if (!ok) break;
    if (ev.kind == LFM_EVENT_TOKEN) {
      printf("%d ", ev.token);
    } else {
      printf("\n");
      if (draft) fprintf(stderr, "greedy: %lld drafted, %lld accepted\n", (long long)ev.drafted_tokens,
                         (long long)ev.accepted_tokens);
      if (ev.finish_reason == LFM_FINISH_ERROR) {
        fprintf(stderr, "greedy: %s\n", ev.error);
        ok = 0;
      }
      break;
    }
  }
  lfm_request_free(req);
  lfm_engine_free(engine);
  lfm_model_free(model);
  return ok ? 0 : 1;
}
