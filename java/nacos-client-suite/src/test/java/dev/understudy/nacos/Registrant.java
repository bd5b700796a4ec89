package dev.understudy.nacos;

import com.alibaba.nacos.api.naming.NamingFactory;
import com.alibaba.nacos.api.naming.NamingService;
import java.util.Properties;

/**
 * A client JVM of its own, forked by a test: it registers one ephemeral
 * instance, says so on stdout and waits to be killed.
 * Arguments: serverAddr service ip port [username password].
 */
public final class Registrant {
    private Registrant() {}

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.setProperty("serverAddr", args[0]);
        if (args.length > 5) {
            props.setProperty("username", args[4]);
            props.setProperty("password", args[5]);
        }
        NamingService naming = NamingFactory.createNamingService(props);
        naming.registerInstance(args[1], args[2], Integer.parseInt(args[3]));
        System.out.println("registered");
        System.out.flush();
        // Until killed: the test SIGKILLs this JVM.
        Thread.currentThread().join();
    }
}
