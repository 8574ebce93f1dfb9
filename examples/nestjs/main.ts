import { createNestApp } from './app.js';

const { app } = await createNestApp({ inbox: { db: process.env.DATABASE_URL } });
app.enableShutdownHooks();
await app.listen(Number(process.env.PORT ?? 3000));
console.log('listening');
