import DownloadKit
import Foundation
import HTTPClient
import TestOrigin

/// Fast retries so failure-path tests stay quick; generous timeouts because the suite runs
/// ~200 tests in parallel on 2 cores.
func testConfiguration(
    retries: Int = 3, urlProvider: (@Sendable (URLRefreshContext) async -> String?)? = nil,
    maxRedirects: Int = 10, checkpointInterval: Double = 2
) -> DownloadConfiguration {
    DownloadConfiguration(
        maxRedirects: maxRedirects, retries: retries, retryBaseDelay: 0.01, maxRetryDelay: 0.05,
        checkpointInterval: checkpointInterval, progressInterval: 0.02, urlProvider: urlProvider,
        client: HTTPClientConfiguration(connectTimeout: 20, idleTimeout: 20))
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

/// The reasons carried by state-change events.
func reasons(_ events: [DownloadEvent]) -> [DownloadStateReason] {
    events.compactMap { event in
        if case .stateChanged(_, let reason) = event { return reason }
        return nil
    }
}
