#include "wire/prometheus_text.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace kvroute::wire {

void AppendHelpAndType(std::string* out, std::string_view name, std::string_view type,
                       std::string_view help) {
  out->append("# HELP ");
  out->append(name);
  out->push_back(' ');
  for (char c : help) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else {
      out->push_back(c);
    }
  }
  out->append("\n# TYPE ");
  out->append(name);
  out->push_back(' ');
  out->append(type);
  out->push_back('\n');
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::vector<PrometheusSample> ParsePrometheusText(std::string_view text_in) {
  std::vector<PrometheusSample> out;
  const absl::string_view text(text_in.data(), text_in.size());
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    PrometheusSample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ' && line[i] != '\t') ++i;
    s.name = std::string(line.substr(0, i));
    if (i < line.size() && line[i] == '{') {
      ++i;
      bool ok = true;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        if (eq == absl::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"') {
          ok = false;
          break;
        }
        std::string key(absl::StripAsciiWhitespace(line.substr(i, eq - i)));
        std::string value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) {
            ++j;
            value.push_back(line[j] == 'n' ? '\n' : line[j]);
          } else {
            value.push_back(line[j]);
          }
        }
        if (j >= line.size()) {
          ok = false;
          break;
        }
        s.labels[std::move(key)] = std::move(value);
        i = j + 1;
        while (i < line.size() && (line[i] == ',' || line[i] == ' ')) ++i;
      }
      if (!ok || i >= line.size()) continue;
      ++i;  // '}'
    }
    absl::string_view rest = absl::StripLeadingAsciiWhitespace(line.substr(i));
    absl::string_view value = rest.substr(0, rest.find_first_of(" \t"));
    if (value == "NaN" || value == "+Inf" || value == "-Inf") continue;
    if (!absl::SimpleAtod(value, &s.value)) continue;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace kvroute::wire
