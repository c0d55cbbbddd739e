/// The statuses that may mean the URL itself went stale rather than the resource: a signed or
/// token-bearing URL that expired (401, 403) or a resource moved away from a URL that was handed out
/// for a while (404, 410). After one of them a download with a URL provider asks it for a fresh URL
/// (`DownloadConfiguration.urlProvider`), on one connection and in every segment worker alike.
package enum URLExpiry {
    /// 401, 403, 404 and 410.
    package static let statuses: Set<Int> = [401, 403, 404, 410]
}
