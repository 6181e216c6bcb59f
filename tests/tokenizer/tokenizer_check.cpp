// A window into BpeTokenizer for tests/tokenizer_families_test.py: reads a JSON list of texts on
// standard input and writes, for each, the pieces BPE runs on (added tokens with their ids), the
// ids, and the decoded text, as JSON on standard output. Usage: tokenizer_check TOKENIZER
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "engine/data/bpe_tokenizer.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: tokenizer_check TOKENIZER < texts.json\n";
    return 2;
  }
  try {
    auto tok = zinf::engine::BpeTokenizer::load(argv[1]);
    const std::string input{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
    const auto texts = nlohmann::json::parse(input);
    nlohmann::json out = nlohmann::json::array();
    for (const auto& t : texts) {
      const std::string text = t.get<std::string>();
      nlohmann::json pieces = nlohmann::json::array();
      for (const auto& p : tok.pieces(text)) pieces.push_back({p.text, p.added});
      const auto ids = tok.encode(text);
      out.push_back({{"pieces", pieces}, {"ids", ids}, {"decoded", tok.decode(ids)}});
    }
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "tokenizer_check: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
