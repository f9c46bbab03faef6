// Reads T lines of "a b" and prints a+b for each (a stdin/stdout problem).
#include <iostream>

int main() {
    int t;
    std::cin >> t;
    while (t--) {
        long long a, b;
        std::cin >> a >> b;
        std::cout << a + b << '\n';
    }
}
