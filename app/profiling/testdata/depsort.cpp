// A scheduler that re-sorts each node's dependency vector on every query
// (the repeated work the seed found), versus sorting once per node.
#include <algorithm>
#include <cstdio>
#include <vector>

static std::vector<std::vector<int>> deps;

__attribute__((noinline)) static std::vector<int> sorted_deps(int node) {
    std::vector<int> d = deps[node];
    std::sort(d.begin(), d.end());
    return d;
}

__attribute__((noinline)) static long schedule(int nodes, int queries) {
    long sum = 0;
    for (int q = 0; q < queries; q++)
        for (int n = 0; n < nodes; n++)
            sum += sorted_deps(n).front();
    return sum;
}

int main() {
    const int nodes = 50;
    deps.resize(nodes);
    for (int n = 0; n < nodes; n++)
        for (int k = 0; k < 8; k++) deps[n].push_back((n * 7 + k * 13) % 31);
    std::printf("%ld\n", schedule(nodes, 40));
}
