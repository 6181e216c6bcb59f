// `zinf tokenize`: text in, llm.c token file out. Each input (a file, or a directory whose text
// files are each a document) is encoded by the user's tokenizer (engine/data/bpe_tokenizer.hpp:
// GPT-2's vocab.json + merges.txt, or a tokenizer.json of GPT-2, GPT-NeoX, Llama 2/3, Mistral or
// Qwen2), each document between the tokenizer's document start and end (the template's BOS, else
// <|endoftext|> before it), and written as an llm.c .bin that `zinf train --data` reads: 16-bit ids
// for a vocabulary up to 65536 (GPT-2's format), 32-bit past it (llm.c's Llama 3 format).
#include <fmt/format.h>

#include <memory>

#include "cli/command.hpp"
#include "cli/file_checks.hpp"
#include "engine/data/bpe_tokenizer.hpp"
#include "engine/data/token_data.hpp"

namespace zinf::cli {
namespace {

struct TokenizeArgs {
  std::string tokenizer, output;
  std::vector<std::string> inputs;
};

void run_tokenize(const TokenizeArgs& a) {
  check_input("--tokenizer", a.tokenizer, kTokenizerInput);
  for (const auto& input : a.inputs) check_input("inputs", input, kDataInput);
  check_output("tokenize", "--output", a.output);
  auto tok = engine::BpeTokenizer::load(a.tokenizer);
  engine::TokenIds tokens;
  for (const auto& input : a.inputs) {
    const auto corpus = engine::TokenCorpus::load(input, &tok);
    fmt::print("{}: {} tokens\n", input, corpus.tokens.size());
    tokens.append(corpus.tokens);
  }
  engine::write_llmc_bin(a.output, tokens);
  fmt::print("wrote {} ({} tokens as {}, vocabulary of {} from {}: {})\n", a.output, tokens.size(),
             tokens.wide() ? "32-bit ids, llm.c's Llama 3 format" : "16-bit ids, llm.c's GPT-2 format",
             tok.vocab_size(), tok.source(), tok.description());
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "Encode text into an llm.c .bin token file with a BPE tokenizer: GPT-2's "
                                             "vocab.json + merges.txt, or the tokenizer.json of GPT-2, GPT-NeoX, Llama "
                                             "2/3, Mistral or Qwen2 (other steps are refused by name)");
  auto a = std::make_shared<TokenizeArgs>();
  cmd->add_option("--tokenizer", a->tokenizer,
                  "A tokenizer.json, or a directory (a Hugging Face model folder) holding tokenizer.json or "
                  "vocab.json + merges.txt")
      ->required();
  cmd->add_option("-o,--output", a->output, "The .bin file to write")->required();
  cmd->add_option("inputs", a->inputs, "Text files or directories of text files")->required();
  cmd->callback([a] { run_tokenize(*a); });
}

}  // namespace zinf::cli
