// Java hello-world (com.sun.net.httpserver) for the tests, benches and `torpor-bench paper`.
import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.net.InetSocketAddress;

public class Hello {
    public static void main(String[] args) throws Exception {
        int port = args.length > 0 ? Integer.parseInt(args[0]) : 8080;
        HttpServer s = HttpServer.create(new InetSocketAddress(port), 0);
        s.createContext("/", x -> {
            byte[] body = "hello from java\n".getBytes();
            x.sendResponseHeaders(200, body.length);
            try (OutputStream o = x.getResponseBody()) {
                o.write(body);
            }
        });
        s.start();
    }
}
