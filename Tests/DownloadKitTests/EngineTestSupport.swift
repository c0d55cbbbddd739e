import DownloadKit
import Foundation
import HTTPClient
import TestOrigin

/// A directory under the system temp directory, removed when the value is released.
final class ScratchDirectory: @unchecked Sendable {
    let path: String

    init() throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("dk-engine-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    func file(_ name: String) -> String { path + "/" + name }

    /// The names in the directory, sorted.
    var contents: [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted()
    }

    func size(_ name: String) -> Int64? {
        (try? FileManager.default.attributesOfItem(atPath: file(name))[.size] as? Int64) ?? nil
    }
}

/// Fast retries so failure-path tests stay quick.
func testConfiguration(
    retries: Int = 3, urlProvider: (@Sendable (URLRefreshContext) async -> String?)? = nil,
    maxRedirects: Int = 10, checkpointInterval: Double = 2
) -> DownloadConfiguration {
    DownloadConfiguration(
        maxRedirects: maxRedirects, retries: retries, retryBaseDelay: 0.01, maxRetryDelay: 0.05,
        checkpointInterval: checkpointInterval, progressInterval: 0.02, urlProvider: urlProvider,
        client: HTTPClientConfiguration(connectTimeout: 5, idleTimeout: 5))
}

/// Runs a download and collects its events.
func runDownload(
    _ request: DownloadRequest, configuration: DownloadConfiguration = testConfiguration()
) async -> (Result<DownloadResult, DownloadError>, [DownloadEvent]) {
    let download = Download(request, configuration: configuration)
    download.start()
    var events: [DownloadEvent] = []
    for await event in download.events { events.append(event) }
    do {
        return (.success(try await download.result()), events)
    } catch {
        return (.failure(error), events)
    }
}

/// Whether the file at `path` holds exactly the TestPattern bytes for `size` and `seed`.
func fileMatchesPattern(_ path: String, size: Int64, seed: UInt64) -> Bool {
    guard let data = FileManager.default.contents(atPath: path), Int64(data.count) == size else { return false }
    return data.withUnsafeBytes { TestPattern.firstMismatch(in: $0, offset: 0, seed: seed) == nil }
}

/// The reasons carried by state-change events.
func reasons(_ events: [DownloadEvent]) -> [DownloadStateReason] {
    events.compactMap { event in
        if case .stateChanged(_, let reason) = event { return reason }
        return nil
    }
}
