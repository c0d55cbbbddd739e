import BenchSupport
import Foundation
import Glibc

/// Where and with what a benchmark ran, recorded with every result.
struct MachineInfo: Codable, Sendable {
    var date: String
    var uname: String
    var cpuModel: String
    var cpuCount: Int
    var memoryGiB: Double
    var swiftVersion: String
    var buildConfiguration: String
    /// Tool name → first line of its version output ("missing" for absent peers).
    var versions: [String: String]
    /// `/proc/loadavg`'s 1, 5 and 15 minute averages when the runs started (other load skews results).
    var loadAverageAtStart: String

    static func collect(nginx: String, clients: [Client], missing: [String]) -> MachineInfo {
        var versions: [String: String] = [:]
        versions["nginx"] = MachineProbe.firstLine(of: nginx, ["-v"])
        for client in clients where client.kind.isPeer {
            versions[client.kind.rawValue] = MachineProbe.firstLine(of: client.executable, ["--version"])
        }
        for name in missing { versions[name] = "missing" }
        versions["openssl"] = MachineProbe.firstLine(of: "openssl", ["version"])
        #if DEBUG
            let build = "debug (numbers are meaningless: use swift run -c release)"
        #else
            let build = "release"
        #endif
        return MachineInfo(
            date: MachineProbe.date(),
            uname: MachineProbe.firstLine(of: "uname", ["-a"]),
            cpuModel: MachineProbe.cpuModel(),
            cpuCount: MachineProbe.cpuCount,
            memoryGiB: Double(sysconf(Int32(_SC_PHYS_PAGES))) * Double(sysconf(Int32(_SC_PAGESIZE))) / 1_073_741_824,
            swiftVersion: MachineProbe.firstLine(of: "swift", ["--version"]),
            buildConfiguration: build,
            versions: versions,
            loadAverageAtStart: MachineProbe.loadAverage())
    }
}
