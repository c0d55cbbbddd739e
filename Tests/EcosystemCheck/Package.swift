// swift-tools-version:6.0
// A program that imports DownloadKit together with the ecosystem packages whose type names it must not
// collide with (issue #16). Built by Scripts/test.sh; it is not part of DownloadKit's own graph, so
// nobody who depends on DownloadKit compiles AsyncHTTPClient or swift-crypto because of it.
import PackageDescription

let package = Package(
    name: "EcosystemCheck",
    dependencies: [
        .package(name: "DownloadKit", path: "../.."),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.0"),
        .package(url: "https://github.com/apple/swift-system", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
    ],
    targets: [
        .executableTarget(
            name: "EcosystemCheck",
            dependencies: [
                .product(name: "DownloadKit", package: "DownloadKit"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ]
        )
    ]
)
