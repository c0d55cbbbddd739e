// swift-tools-version:6.1
// DownloadKit: resumable HTTP/1.1 + HTTPS downloads from scratch (POSIX sockets, OpenSSL, own parser).
// Module shape and dependency direction are described in docs/ARCHITECTURE.md; the package graph (what a
// consumer resolves, the traits, the Fleet/ package) in docs/PACKAGES.md.
import PackageDescription

// What a package that depends on this repository resolves is what its *products* reach (test targets and
// executable targets that are not products are pruned; measured in docs/PACKAGES.md). So:
// - the libraries a Swift program embeds are products, and the ones that need a heavy package name it only
//   under a package trait that is off by default: `DownloadKit` (with `HTTPClient`, `HTTPWire`) resolves
//   swift-log, swift-metrics, swift-distributed-tracing and swift-http-types and nothing else;
//   `DownloadKitManager` needs the trait `Manager` (GRDB); the tool's libraries need `Tools`.
// - the executables (`downloadkit`, `downloadkitd`, the benchmark) are executable targets, not products: built
//   and run from this directory with `--traits Tools` (the README's commands), invisible to a consumer.
// - the PostgreSQL fleet (postgres-nio, which brings BoringSSL and swift-crypto) and the ecosystem check
//   (AsyncHTTPClient, NIOSSL, swift-crypto) live in the package in Fleet/, which depends on this one by path.
let manager = TargetDependencyCondition.when(traits: ["Manager"])!
let tools = TargetDependencyCondition.when(traits: ["Tools"])!

let package = Package(
    name: "DownloadKit",
    // Linux only (decided, issue #16): the engine uses Glibc, splice(2), fallocate(2), sync_file_range(2),
    // flock on open file descriptions, SO_PEERCRED and /proc; there is no macOS port and no claim of one.
    products: [
        .library(name: "DownloadKit", targets: ["DownloadKit"]),
        .library(name: "HTTPWire", targets: ["HTTPWire"]),
        .library(name: "HTTPClient", targets: ["HTTPClient"]),
        // The background-session client and wire protocol (Foundation only).
        .library(name: "DownloadKitSession", targets: ["DownloadKitSession"]),
        // The task manager and its SQLite store (GRDB): with the trait `Manager`.
        .library(name: "DownloadKitManager", targets: ["DownloadKitManager"]),
        // The fault-injecting origin and the peers' launchers (nginx, PostgreSQL) for tests and benchmarks, here
        // and in Fleet/. It costs a consumer nothing (HTTPWire and swift-log); Scripts/check-products.sh keeps it
        // out of the shipped executables (issue #12).
        .library(name: "DownloadKitTestOrigin", targets: ["TestOrigin"]),
        // What both benchmarks (here and in Fleet/) state their figures with: spread, number formats, the machine.
        .library(name: "DownloadKitBenchSupport", targets: ["BenchSupport"]),
        // The command-line tool's commands, the daemon and the aria2 JSON-RPC server as libraries, for Fleet/'s
        // `downloadkit-fleet`; not an API. With the trait `Tools`.
        .library(name: "DownloadKitCLI", targets: ["DownloadKitCLI"]),
    ],
    traits: [
        .trait(name: "Manager", description: "DownloadKitManager: the task manager and its SQLite store (GRDB)."),
        .trait(
            name: "Tools",
            description: "The downloadkit and downloadkitd executables, the daemon, the aria2 JSON-RPC server and the benchmark.",
            enabledTraits: ["Manager"]),
        .default(enabledTraits: []),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", from: "1.16.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.5.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.1.0"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.0.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.0.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.0.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", from: "2.0.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.0.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.0.0"),
    ],
    targets: [
        // OpenSSL 3 from the system (apt: libssl-dev). Holds only the module map and shim header.
        .systemLibrary(
            name: "COpenSSL",
            pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]
        ),
        // C functions for OpenSSL macros and version differences, all prefixed `dk_` (TLS only).
        .target(name: "CDownloadKitShims", dependencies: ["COpenSSL"]),
        // C wrappers for Linux file and thread syscalls Swift cannot call directly (fallocate flags, splice,
        // sync_file_range, xattrs, thread names), all prefixed `dk_`. No OpenSSL.
        .target(name: "CDownloadKitSystem"),
        // HTTP/1.1 as bytes: no I/O, standard library only (fuzzed by Fuzz/).
        .target(name: "HTTPWire"),
        // Metalink 4 (RFC 5854) and Metalink 3 documents as values (docs/METALINK.md): its own small XML reader,
        // standard library and HTTPWire only. Not FoundationXML: that needs libxml2 at run time (the .deb's static
        // build would grow a dependency) and brings a DTD-reading, entity-expanding parser (billion laughs, XXE).
        // Not in HTTPWire, which is HTTP/1.1 as bytes; the Metalink/HTTP header grammars (Link, Digest) are
        // there. Not a product yet (the CLI's `--metalink` depends on it), so no consumer resolves anything
        // new; as a product it would add nothing either: HTTPWire is already part of `DownloadKit`.
        .target(name: "DownloadKitMetalink", dependencies: ["HTTPWire"], path: "Sources/Metalink"),
        // The runtime layer (docs/ARCHITECTURE.md, "Runtime layer"): the one lock and wait/wake primitive, the
        // monotonic clock, the async<->thread bridge, errno and the one EINTR rule. Standard library and Glibc
        // only. Not a product: HTTPClient re-exports it, so every product that has HTTPClient carries it.
        .target(name: "DownloadKitRuntime", path: "Sources/Runtime"),
        // Sockets, DNS, TLS, connection pool, one request/response exchange.
        .target(
            name: "HTTPClient",
            dependencies: [
                "DownloadKitRuntime", "HTTPWire", "COpenSSL", "CDownloadKitShims", "CDownloadKitSystem",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The download's decisions as values, no I/O: range, retry and restart policy, the low-speed rule,
        // send-ahead, piece checks, stop and existing-file rules. HTTPWire only, so the client's sockets and TLS
        // and DownloadKit's file code are out of reach; time and randomness are inputs (docs/ARCHITECTURE.md,
        // "The download state machine"). Not a product: DownloadKit re-exports it.
        .target(name: "DownloadKitDecisions", dependencies: ["HTTPWire"], path: "Sources/Decisions"),
        // The public library: resumable engine, resume info, segments. No SQLite.
        .target(
            name: "DownloadKit",
            dependencies: [
                "DownloadKitDecisions", "HTTPClient", "HTTPWire", "CDownloadKitSystem",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ]
        ),
        // The manager: queue, scheduler, network monitors, task store (GRDB/SQLite), task handles.
        .target(
            name: "DownloadKitManager",
            dependencies: [
                "DownloadKit", "HTTPClient", "HTTPWire",
                // getrandom(2) in bulk for task identifiers (TaskIdentifier.Generator).
                "CDownloadKitSystem",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "GRDB", package: "GRDB.swift", condition: manager),
                // SQLite's C API for the task store's row writes (TaskRecord.write(update:replace:in:)).
                .product(name: "GRDBSQLite", package: "GRDB.swift", condition: manager),
            ]
        ),
        // aria2-compatible JSON-RPC over a DownloadManager (HTTP POST + WebSocket at /jsonrpc). The only
        // target that depends on Hummingbird; its pure decoding files need only Foundation (fuzzed).
        .target(
            name: "DownloadKitRPC",
            dependencies: [
                "DownloadKit", "DownloadKitManager", "HTTPClient", "HTTPWire",
                // aria2.addMetalink: the document parsed and planned as the CLI's `get --metalink` does.
                "DownloadKitMetalink",
                .product(name: "Hummingbird", package: "hummingbird", condition: tools),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket", condition: tools),
                .product(name: "NIOCore", package: "swift-nio", condition: tools),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: tools),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // A fault-injecting HTTP/1.1 origin on loopback plus nginx and PostgreSQL launchers (tests, benchmarks).
        .target(
            name: "TestOrigin",
            dependencies: ["CTestPattern", "DownloadKitRuntime", "HTTPWire", .product(name: "Logging", package: "swift-log")]
        ),
        // The test resources' byte pattern, filled and checked in C: fast in debug builds too (its header says why).
        .target(name: "CTestPattern"),
        // Background sessions (docs/DAEMON.md): the wire protocol and client (Foundation and the runtime layer
        // only), the daemon.
        .target(name: "DownloadKitSession", dependencies: ["CDownloadKitSystem", "DownloadKitRuntime"]),
        .target(
            name: "DownloadKitDaemon",
            dependencies: [
                "DownloadKit", "DownloadKitManager", "DownloadKitSession", "DownloadKitRuntime", "HTTPClient",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "GRDB", package: "GRDB.swift", condition: manager),
                .product(name: "ArgumentParser", package: "swift-argument-parser", condition: tools),
            ]
        ),
        // The commands of `downloadkit` (get, queue, resume-info, demo, daemon, session, rpc); `downloadkit-fleet`
        // in Fleet/ is the same commands with the PostgreSQL queue plugged in (FleetQueue).
        .target(
            name: "DownloadKitCLI",
            dependencies: [
                "DownloadKit", "DownloadKitManager", "DownloadKitSession", "DownloadKitDaemon", "DownloadKitRPC",
                "HTTPClient", "HTTPWire", "DownloadKitMetalink",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser", condition: tools),
            ]
        ),
        .executableTarget(
            name: "downloadkitd",
            dependencies: [
                "DownloadKitDaemon",
                .product(name: "ArgumentParser", package: "swift-argument-parser", condition: tools),
            ]
        ),
        .executableTarget(name: "downloadkit", dependencies: ["DownloadKitCLI"]),
        // The benchmark: an executable target, not a product, so a package that depends on DownloadKit never
        // sees it or the test harness it links (issue #12). `swift build --traits Tools --product
        // downloadkit-bench` and Scripts/bench.sh build it here.
        // What both benchmarks state their figures with (spread, number formats, machine); no DownloadKit.
        .target(name: "BenchSupport", dependencies: ["TestOrigin"], path: "Benchmarks/BenchSupport"),
        .executableTarget(
            name: "downloadkit-bench",
            dependencies: [
                "DownloadKit", "DownloadKitManager", "HTTPClient", "TestOrigin", "BenchSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser", condition: tools),
            ],
            path: "Benchmarks/downloadkit-bench"
        ),
        .testTarget(name: "HTTPWireTests", dependencies: ["HTTPWire"]),
        // setns(2) for tests that watch a network namespace of their own (Swift's Glibc leaves it out).
        .target(name: "CTestSystem", path: "Tests/CTestSystem"),
        // The tests' own threads beside the cooperative pool, and the `.offPool` trait that puts a suite on
        // them (docs/TESTING.md). Swift Testing and the runtime layer only: no sockets, no processes.
        .target(name: "TestThreads", dependencies: ["CDownloadKitSystem", "DownloadKitRuntime"], path: "Tests/TestThreads"),
        .testTarget(name: "DecisionsTests", dependencies: ["DownloadKitDecisions", "HTTPWire", "TestThreads"]),
        .testTarget(name: "MetalinkTests", dependencies: ["DownloadKitMetalink", "HTTPWire", "TestThreads"]),
        .testTarget(
            name: "HTTPClientTests",
            dependencies: [
                "DownloadKitRuntime", "HTTPClient", "HTTPWire", "TestOrigin", "TestThreads",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "DownloadKitTests",
            dependencies: [
                "CTestSystem", "DownloadKit", "DownloadKitDecisions", "DownloadKitManager", "HTTPClient", "HTTPWire",
                "TestOrigin", "TestThreads",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            resources: [.copy("Fixtures")]
        ),
        .testTarget(name: "RPCTests", dependencies: ["DownloadKitRPC", "DownloadKit", "DownloadKitManager", "TestOrigin"]),
        .testTarget(name: "ConformanceTests", dependencies: ["DownloadKit", "HTTPClient", "HTTPWire", "TestOrigin", "TestThreads"]),
        .testTarget(
            name: "DaemonTests",
            dependencies: ["DownloadKitSession", "DownloadKitDaemon", "DownloadKit", "DownloadKitManager", "TestOrigin"]),
    ]
)

// Sanitizer builds (Scripts/sanitizer-flags.sh): DOWNLOADKIT_SANITIZE=address or =thread instruments this package's
// own targets — C, Swift and the link of everything that links them — and leaves the packages it depends on
// uninstrumented. CI's sanitizer builds then reuse the dependencies' objects of the debug build in the same scratch
// directory instead of compiling SwiftNIO, Hummingbird and GRDB again for each sanitizer (docs/PACKAGES.md,
// "The test command's builds"). ASan's shadow checks our accesses wherever the memory came from; TSan sees the
// dependencies' locks through its pthread interceptors, and their atomics not at all — our code is what is gated.
// Unsafe flags are allowed here because they exist only when a developer or CI sets the variable on a build of
// this repository; a consumer's build never has them.
if let sanitizer = Context.environment["DOWNLOADKIT_SANITIZE"] {
    let swift: [String], c: [String]
    switch sanitizer {
    case "address":
        // UBSan in trap mode for the C targets (swiftc has no UBSan on Linux; trap mode needs no runtime).
        (swift, c) = (["-sanitize=address"], ["-fsanitize=address,undefined", "-fsanitize-trap=undefined"])
    case "thread":
        (swift, c) = (["-sanitize=thread"], ["-fsanitize=thread"])
    default:
        fatalError("DOWNLOADKIT_SANITIZE=\(sanitizer): expected address or thread")
    }
    for target in package.targets where target.type != .system {
        target.swiftSettings = (target.swiftSettings ?? []) + [.unsafeFlags(swift)]
        target.cSettings = (target.cSettings ?? []) + [.unsafeFlags(c)]
        target.linkerSettings = (target.linkerSettings ?? []) + [.unsafeFlags(swift)]
    }
    // No sanitizer run measures the benchmark; its executable is left out of their builds.
    package.targets.removeAll { $0.name == "downloadkit-bench" }
}
// DOWNLOADKIT_TEST_TARGETS="A B": the test bundle holds only these test targets (Scripts/sanitizers.sh's TSan build,
// which runs three of the six, compiles only those three).
if let kept = Context.environment["DOWNLOADKIT_TEST_TARGETS"]?.split(separator: " ").map(String.init) {
    package.targets.removeAll { $0.type == .test && !kept.contains($0.name) }
}
