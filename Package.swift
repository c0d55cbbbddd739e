// swift-tools-version:6.0
// DownloadKit: resumable HTTP/1.1 + HTTPS downloads from scratch (POSIX sockets, OpenSSL, own parser).
// Module shape and dependency direction are described in docs/ARCHITECTURE.md.
import PackageDescription

let package = Package(
    name: "DownloadKit",
    // Linux only (decided, issue #16): the engine uses Glibc, splice(2), fallocate(2), sync_file_range(2),
    // flock on open file descriptions, SO_PEERCRED and /proc; there is no macOS port and no claim of one.
    products: [
        .library(name: "DownloadKit", targets: ["DownloadKit"]),
        // The task manager and its SQLite store (GRDB): a program that only needs `Download` never compiles SQLite.
        .library(name: "DownloadKitManager", targets: ["DownloadKitManager"]),
        .library(name: "HTTPWire", targets: ["HTTPWire"]),
        .library(name: "HTTPClient", targets: ["HTTPClient"]),
        .library(name: "DownloadKitSession", targets: ["DownloadKitSession"]),
        .library(name: "DownloadKitDaemon", targets: ["DownloadKitDaemon"]),
        .executable(name: "downloadkitd", targets: ["downloadkitd"]),
        .library(name: "DownloadKitRPC", targets: ["DownloadKitRPC"]),
        .executable(name: "downloadkit", targets: ["downloadkit"]),
        // The fleet: the task store in PostgreSQL (postgres-nio), leases, failover and fencing (docs/FLEET.md).
        // Its own product so nobody compiles a PostgreSQL client without asking for it.
        .library(name: "DownloadKitPostgres", targets: ["DownloadKitPostgres"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.5.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.1.0"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.0.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.0.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.0.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", from: "2.0.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.0.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.0.0"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        // Named only for EcosystemTests (issue #16: DownloadKit imported beside them compiles). All four are
        // already in the graph through Hummingbird and postgres-nio; a test target's packages are never
        // built for a package that depends on DownloadKit.
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.0"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.0"),
        .package(url: "https://github.com/apple/swift-system", from: "1.8.0"),
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
        // Sockets, DNS, TLS, connection pool, one request/response exchange.
        .target(
            name: "HTTPClient",
            dependencies: [
                "HTTPWire", "COpenSSL", "CDownloadKitShims", "CDownloadKitSystem",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The public library: resumable engine, resume info, segments. No SQLite.
        .target(
            name: "DownloadKit",
            dependencies: [
                "HTTPClient", "HTTPWire", "CDownloadKitSystem",
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
                .product(name: "GRDB", package: "GRDB.swift"),
                // SQLite's C API for the task store's row writes (TaskRecord.write(update:replace:in:)).
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
            ]
        ),
        // aria2-compatible JSON-RPC over a DownloadManager (HTTP POST + WebSocket at /jsonrpc). The only
        // target that depends on Hummingbird; its pure decoding files need only Foundation (fuzzed).
        .target(
            name: "DownloadKitRPC",
            dependencies: [
                "DownloadKit", "DownloadKitManager", "HTTPClient",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The PostgreSQL task store and the fleet worker (docs/FLEET.md). The only target that depends on
        // postgres-nio; DownloadKit and DownloadKitManager never do.
        .target(
            name: "DownloadKitPostgres",
            dependencies: [
                "DownloadKit", "DownloadKitManager", "HTTPClient", "HTTPWire",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // A fault-injecting HTTP/1.1 origin on loopback plus an nginx harness (tests, demo, benchmarks).
        .target(name: "TestOrigin", dependencies: ["HTTPWire", .product(name: "Logging", package: "swift-log")]),
        // Background sessions (docs/DAEMON.md): the wire protocol and client (Foundation only), the daemon.
        .target(name: "DownloadKitSession"),
        .target(
            name: "DownloadKitDaemon",
            dependencies: [
                "DownloadKit", "DownloadKitManager", "DownloadKitSession", "HTTPClient",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "downloadkitd",
            dependencies: ["DownloadKitDaemon", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        .executableTarget(
            name: "downloadkit",
            dependencies: [
                "DownloadKit", "DownloadKitManager", "DownloadKitSession", "DownloadKitDaemon", "DownloadKitRPC",
                "DownloadKitPostgres",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // The benchmark: an executable target of this (root) package, deliberately not a product, so a package
        // that depends on DownloadKit never sees it or the test harness it links (issue #12). `swift build
        // --product downloadkit-bench` and Scripts/bench.sh still build it here.
        // What both benchmarks state their figures with (spread, number formats, machine); no DownloadKit.
        .target(name: "BenchSupport", dependencies: ["TestOrigin"], path: "Benchmarks/BenchSupport"),
        .executableTarget(
            name: "downloadkit-bench",
            dependencies: [
                "DownloadKit", "DownloadKitManager", "HTTPClient", "TestOrigin", "BenchSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Benchmarks/downloadkit-bench"
        ),
        // The fleet's benchmark (docs/BENCHMARKS.md, "Fleet"): claims per second on one PostgreSQL server and the
        // restore of a queue, beside SQLite. Apart from downloadkit-bench so that one never links postgres-nio;
        // not a product either.
        .executableTarget(
            name: "downloadkit-fleet-bench",
            dependencies: [
                "DownloadKitPostgres", "DownloadKitManager", "DownloadKit", "TestOrigin", "BenchSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Benchmarks/downloadkit-fleet-bench"
        ),
        .testTarget(name: "HTTPWireTests", dependencies: ["HTTPWire"]),
        .testTarget(
            name: "HTTPClientTests",
            dependencies: ["HTTPClient", "HTTPWire", "TestOrigin", .product(name: "Logging", package: "swift-log")]
        ),
        .testTarget(
            name: "DownloadKitTests",
            dependencies: [
                "DownloadKit", "DownloadKitManager", "HTTPClient", "HTTPWire", "TestOrigin",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            resources: [.copy("Fixtures")]
        ),
        .testTarget(name: "RPCTests", dependencies: ["DownloadKitRPC", "DownloadKit", "DownloadKitManager", "TestOrigin"]),
        .testTarget(name: "ConformanceTests", dependencies: ["DownloadKit", "HTTPClient", "HTTPWire", "TestOrigin"]),
        .testTarget(
            name: "DaemonTests",
            dependencies: ["DownloadKitSession", "DownloadKitDaemon", "DownloadKit", "DownloadKitManager", "TestOrigin"]),
        // DownloadKit imported beside AsyncHTTPClient, NIO, NIOSSL, swift-http-types, swift-crypto and swift-system
        // with their type names unqualified (issue #16), and both HTTP clients in one process.
        .testTarget(
            name: "EcosystemTests",
            dependencies: [
                "DownloadKit", "TestOrigin",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ]),
        // The fleet on a real PostgreSQL server the tests start themselves (docs/FLEET.md).
        .testTarget(
            name: "FleetTests",
            dependencies: [
                "DownloadKitPostgres", "DownloadKit", "DownloadKitManager", "TestOrigin",
                // FleetBenchCheckTests: the bench's exactly-once check on claims from a real store.
                "downloadkit-fleet-bench",
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ]),
    ]
)
