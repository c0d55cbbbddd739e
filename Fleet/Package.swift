// swift-tools-version:6.1
// DownloadKit's PostgreSQL fleet (docs/FLEET.md) and the ecosystem check, in a package of their own: postgres-nio
// brings a second TLS stack (BoringSSL, through swift-nio-ssl and swift-crypto) that neither the library nor the
// `downloadkit` people install should carry (docs/PACKAGES.md). It depends on the repository's root package by
// path, with the trait `Tools` for the commands `downloadkit-fleet` shares with `downloadkit`.
//
//   swift build --package-path Fleet                     # DownloadKitPostgres and downloadkit-fleet
//   swift build --package-path Fleet --build-tests       # and FleetTests, EcosystemTests (Scripts/test.sh runs them)
import PackageDescription

let package = Package(
    name: "DownloadKitFleet",
    products: [
        // The PostgreSQL task store, leases, failover and fencing, and the fleet worker.
        .library(name: "DownloadKitPostgres", targets: ["DownloadKitPostgres"]),
        // `downloadkit` with the PostgreSQL queue: `downloadkit-fleet queue --store postgres://… add|list|run|…`.
        .executable(name: "downloadkit-fleet", targets: ["downloadkit-fleet"]),
    ],
    dependencies: [
        .package(name: "DownloadKit", path: "..", traits: ["Tools"]),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        // Named only for EcosystemTests (issue #16: DownloadKit imported beside them compiles, and both HTTP
        // clients work in one process). They share SwiftNIO and BoringSSL with postgres-nio, so this package
        // builds that stack once for both.
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.0"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.0.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.0"),
        .package(url: "https://github.com/apple/swift-system", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.0.0"),
    ],
    targets: [
        // The PostgreSQL task store and the fleet worker. The only target that depends on postgres-nio.
        .target(
            name: "DownloadKitPostgres",
            dependencies: [
                .product(name: "DownloadKit", package: "DownloadKit"),
                .product(name: "DownloadKitManager", package: "DownloadKit"),
                .product(name: "HTTPClient", package: "DownloadKit"),
                .product(name: "HTTPWire", package: "DownloadKit"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "downloadkit-fleet",
            dependencies: [
                "DownloadKitPostgres",
                .product(name: "DownloadKitCLI", package: "DownloadKit"),
                .product(name: "DownloadKit", package: "DownloadKit"),
                .product(name: "DownloadKitManager", package: "DownloadKit"),
                .product(name: "HTTPClient", package: "DownloadKit"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The fleet's benchmark (docs/BENCHMARKS.md, "Fleet"): claims per second on one PostgreSQL server and the
        // restore of a queue, beside SQLite. Not a product. Scripts/bench.sh builds and runs it.
        .executableTarget(
            name: "downloadkit-fleet-bench",
            dependencies: [
                "DownloadKitPostgres",
                .product(name: "DownloadKit", package: "DownloadKit"),
                .product(name: "DownloadKitManager", package: "DownloadKit"),
                .product(name: "DownloadKitTestOrigin", package: "DownloadKit"),
                .product(name: "DownloadKitBenchSupport", package: "DownloadKit"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            path: "Benchmarks/downloadkit-fleet-bench"
        ),
        // The fleet on a real PostgreSQL server the tests start themselves (docs/FLEET.md).
        .testTarget(
            name: "FleetTests",
            dependencies: [
                "DownloadKitPostgres",
                // FleetBenchCheckTests: the bench's exactly-once check on claims from a real store.
                "downloadkit-fleet-bench",
                .product(name: "DownloadKit", package: "DownloadKit"),
                .product(name: "DownloadKitManager", package: "DownloadKit"),
                .product(name: "HTTPClient", package: "DownloadKit"),
                .product(name: "HTTPWire", package: "DownloadKit"),
                .product(name: "DownloadKitTestOrigin", package: "DownloadKit"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ]),
        // DownloadKit imported beside AsyncHTTPClient, NIO, NIOSSL, swift-http-types, swift-crypto and swift-system
        // with their type names unqualified (issue #16), and both HTTP clients in one process.
        .testTarget(
            name: "EcosystemTests",
            dependencies: [
                .product(name: "DownloadKit", package: "DownloadKit"),
                .product(name: "DownloadKitTestOrigin", package: "DownloadKit"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ]),
    ]
)

// DOWNLOADKIT_SANITIZE=address|thread instruments this package's own targets, as the root package's manifest does
// for its own (the rule and its reasons are written there; manifests cannot share code). Scripts/test-fleet.sh
// builds this package in the root package's scratch directory with DOWNLOADKIT_SANITIZE=address, right after the
// root's ASan build, so the root's instrumented modules and the shared dependencies are reused, not rebuilt.
if let sanitizer = Context.environment["DOWNLOADKIT_SANITIZE"] {
    let swift: [String], c: [String]
    switch sanitizer {
    case "address": (swift, c) = (["-sanitize=address"], ["-fsanitize=address,undefined", "-fsanitize-trap=undefined"])
    case "thread": (swift, c) = (["-sanitize=thread"], ["-fsanitize=thread"])
    default: fatalError("DOWNLOADKIT_SANITIZE=\(sanitizer): expected address or thread")
    }
    for target in package.targets {
        target.swiftSettings = (target.swiftSettings ?? []) + [.unsafeFlags(swift)]
        target.cSettings = (target.cSettings ?? []) + [.unsafeFlags(c)]
        target.linkerSettings = (target.linkerSettings ?? []) + [.unsafeFlags(swift)]
    }
}
