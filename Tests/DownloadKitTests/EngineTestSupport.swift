import DownloadKit
import Foundation
import HTTPClient
import TestOrigin

/// Fast retries so failure-path tests stay quick; generous timeouts because the suite runs
/// ~200 tests in parallel on 2 cores.
func testConfiguration(
    retries: Int = 3, urlProvider: (@Sendable (URLRefreshContext) async -> String?)? = nil,
    maxRedirects: Int = 10, checkpointInterval: Duration = .seconds(2)
) -> DownloadConfiguration {
    DownloadConfiguration(
        maxRedirects: maxRedirects, retries: retries, retryBaseDelay: .milliseconds(10), maxRetryDelay: .milliseconds(50),
        checkpointInterval: checkpointInterval, progressInterval: .milliseconds(20), urlProvider: urlProvider,
        client: DKHTTPClientConfiguration(connectTimeout: .seconds(20), idleTimeout: .seconds(20)))
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
