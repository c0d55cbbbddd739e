/// TestOrigin: a fault-injecting HTTP/1.1 origin on loopback and an nginx harness, used by the tests,
/// the `downloadkit demo` command and the benchmark executable.
public enum TestOriginModule {}
